"""The sequence parameters of one request (``sequence_id``, ``sequence_start``, ``sequence_end``)
with Triton's parsing rules and error texts. Pure.

REST carries them as JSON values (an unsigned integer or a string id, booleans), gRPC as typed
``InferParameter`` choices (``int64_param`` or ``string_param``, ``bool_param``): the gRPC codec
checks the choices and hands the values here. An id of 0 or "" means "not part of a sequence".
The flags are Triton's ``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START/END``, which the Python
backend's ``request.flags()`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.wire.errors import ConchError, ErrorCode, invalid

FLAG_START = 1
FLAG_END = 2
MAX_STRING_ID = 128
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class SequenceParams:
    id: int | str = 0
    start: bool = False
    end: bool = False

    @property
    def in_sequence(self) -> bool:
        return self.id != 0 and self.id != ""

    @property
    def flags(self) -> int:
        return (FLAG_START if self.start else 0) | (FLAG_END if self.end else 0)

    @property
    def is_string(self) -> bool:
        return isinstance(self.id, str)

    @property
    def key(self) -> str:
        """The sequence's name in Redis keys: uint64 5 and string "5" are different sequences."""
        return f"s:{self.id}" if isinstance(self.id, str) else f"u:{self.id}"

    @property
    def route_key(self) -> str | None:
        """What keeps a sequence's steps on one version under traffic weights."""
        return self.key if self.in_sequence else None

    def label(self) -> str:
        return str(self.id)


NONE = SequenceParams()


def parse(parameters: dict[str, Any]) -> SequenceParams:
    """Triton's HTTP rules: an id is a uint64 or a string; start and end are booleans."""
    if (
        "sequence_id" not in parameters
        and "sequence_start" not in parameters
        and "sequence_end" not in parameters
    ):
        return NONE
    raw_id = parameters.get("sequence_id", 0)
    if isinstance(raw_id, bool) or not isinstance(raw_id, int | str):
        raise invalid("Unable to parse 'sequence_id'")
    if isinstance(raw_id, int) and not 0 <= raw_id <= UINT64_MAX:
        raise invalid("Unable to parse 'sequence_id'")
    if isinstance(raw_id, str) and len(raw_id) > MAX_STRING_ID:
        raise ConchError(
            ErrorCode.UNSUPPORTED,
            f"string correlation ID cannot be longer than {MAX_STRING_ID} characters",
        )
    start = parameters.get("sequence_start", False)
    if not isinstance(start, bool):
        raise invalid("Unable to parse 'sequence_start'")
    end = parameters.get("sequence_end", False)
    if not isinstance(end, bool):
        raise invalid("Unable to parse 'sequence_end'")
    return SequenceParams(raw_id, start, end)


def lenient(parameters: dict[str, Any]) -> SequenceParams:
    """The parameters of a request already checked at the gateway (never raises)."""
    if "sequence_id" not in parameters:
        return NONE
    try:
        return parse(parameters)
    except ConchError:
        return NONE


# gRPC InferParameter choices Triton accepts for each sequence parameter, and its error texts.
GRPC_CHOICES = {
    "sequence_id": (
        ("int64_param", "string_param"),
        "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
    ),
    "sequence_start": (
        ("bool_param",),
        "invalid value type for 'sequence_start' parameter, expected bool_param.",
    ),
    "sequence_end": (
        ("bool_param",),
        "invalid value type for 'sequence_end' parameter, expected bool_param.",
    ),
}


def check_grpc_choice(name: str, choice: str | None) -> None:
    """Raise Triton's error when a gRPC sequence parameter has the wrong value type."""
    allowed = GRPC_CHOICES.get(name)
    if allowed is not None and choice not in allowed[0]:
        raise invalid(allowed[1])

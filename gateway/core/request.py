"""One inference request as the data plane sees it, whichever protocol brought it.

The REST and gRPC codecs (``gateway.rest.codec``, ``gateway.grpc.codec``) parse their bodies into
a ``ParsedRequest``; admission, validation, the response cache and the protocol extensions act
on it without knowing which protocol it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.extensions.shm_params import ShmRef
from shared.wire import datatypes, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT64_MAX = 2**64 - 1
# Parameters Triton reads as uint64 (sequence ids, priority, timeout in microseconds, sizes and
# offsets, the classification count): 0 .. 2**64-1. Every other integer parameter is Triton's
# TRITONSERVER_PARAMETER_INT, an int64.
UNSIGNED_PARAMETERS = frozenset(
    {
        "sequence_id",
        "priority",
        "timeout",
        "binary_data_size",
        "shared_memory_offset",
        "shared_memory_byte_size",
        "classification",
    }
)


@dataclass
class RequestedOutput:
    name: str
    binary: bool
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedRequest:
    id: str
    inputs: list[Tensor]
    outputs: list[RequestedOutput]
    parameters: dict[str, Any]
    # Binary output is the default for outputs not named in the request.
    binary_default: bool
    # Triton's raw binary request (header length 0): the whole body is the single input.
    raw_body: bytes | None = None
    # Inputs whose bytes are in a registered shared memory region (their data is read from it
    # before validation: ``gateway.extensions.shared_memory``).
    shm_inputs: dict[str, ShmRef] = field(default_factory=dict)


def check_binary(name: str, datatype: str, shape: list[int], data: bytes) -> None:
    expected = tensors.expected_byte_size(datatype, shape)
    if expected is not None:
        if len(data) != expected:
            raise invalid(
                f"input '{name}' has {len(data)} bytes of binary data but shape {shape} of "
                f"{datatype} needs {expected}"
            )
        return
    count = len(tensors.deserialize_bytes(data, name))
    if count != tensors.element_count(shape):
        raise invalid(
            f"input '{name}' has {count} BYTES elements but shape {shape} needs "
            f"{tensors.element_count(shape)}"
        )


def check_shape(name: str, shape: list[int], datatype: str) -> None:
    """Dims are int64 >= 0, and so is the byte size they make (Triton's int64 sizes; NumPy's
    too). A zero dimension does not excuse the others: the tensor is still reshaped."""
    itemsize = datatypes.BY_NAME[datatype].itemsize if datatype in datatypes.BY_NAME else 0
    size = itemsize or 8  # BYTES: NumPy's object arrays hold 8-byte pointers
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= INT64_MAX:
            raise invalid(
                f"input '{name}' has invalid shape {shape}; expected sizes in "
                f"[0, {INT64_MAX}] (int64)"
            )
        size *= max(dim, 1)
    if size > INT64_MAX:
        raise invalid(
            f"input '{name}' has shape {shape} of {datatype}, whose byte size (zero dimensions "
            f"aside) exceeds the int64 range; expected at most {INT64_MAX} bytes"
        )


def check_parameters(parameters: dict[str, Any], where: str) -> None:
    """Every integer in ``parameters`` (nested values included) within the range Triton reads it
    in: uint64 for the parameters it reads as unsigned, int64 for the rest. ``where`` names
    whose parameters they are ("the request", "input 'X'"). A negative value of an unsigned
    parameter is left to that parameter's own check (Triton's text for it)."""
    for key, value in parameters.items():
        if key in UNSIGNED_PARAMETERS:
            low, high, kind = 0, UINT64_MAX, "uint64"
        else:
            low, high, kind = INT64_MIN, INT64_MAX, "int64"
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, bool):
                continue
            if isinstance(item, int):
                if not INT64_MIN <= item <= high:
                    raise invalid(
                        f"parameter '{key}' of {where} is {item}, out of range; expected an "
                        f"integer in [{low}, {high}] ({kind})"
                    )
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)

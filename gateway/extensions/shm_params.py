"""The shared-memory parameters of an input or a requested output (Triton's shared-memory
extensions): ``shared_memory_region``, ``shared_memory_offset`` (default 0) and
``shared_memory_byte_size``, read alike from HTTP JSON and gRPC parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.wire.errors import invalid

REGION = "shared_memory_region"
OFFSET = "shared_memory_offset"
BYTE_SIZE = "shared_memory_byte_size"


@dataclass(frozen=True)
class ShmRef:
    """Where a tensor's bytes are: a registered region, an offset into it and a size."""

    region: str
    offset: int
    byte_size: int


def shm_ref(kind: str, name: str, parameters: dict[str, Any]) -> ShmRef | None:
    """The reference the parameters hold, None when they name no region. ``kind`` is "input"
    or "output", for the messages."""
    if REGION not in parameters:
        if BYTE_SIZE in parameters or OFFSET in parameters:
            raise invalid(
                f"{kind} '{name}' has '{BYTE_SIZE}' or '{OFFSET}' but no '{REGION}'; "
                "a shared memory tensor needs all of region and byte size"
            )
        return None
    region = parameters[REGION]
    if not isinstance(region, str) or not region:
        raise invalid(f"Unable to parse '{REGION}' of {kind} '{name}': expected a region name")
    if BYTE_SIZE not in parameters:
        raise invalid(
            f"{kind} '{name}' names shared memory region '{region}' without "
            f"'{BYTE_SIZE}'; both are required"
        )
    return ShmRef(
        region,
        _unsigned(parameters.get(OFFSET, 0), OFFSET, kind, name),
        _unsigned(parameters[BYTE_SIZE], BYTE_SIZE, kind, name),
    )


def _unsigned(value: Any, field: str, kind: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(
            f"Unable to parse '{field}' of {kind} '{name}': expected an integer >= 0, got {value!r}"
        )
    return value

"""One inference request as the data plane sees it, whichever protocol brought it.

The REST and gRPC codecs (``gateway.rest.codec``, ``gateway.grpc.codec``) parse their bodies into
a ``ParsedRequest``; admission, validation, the response cache and the protocol extensions act
on it without knowing which protocol it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.extensions.shm_params import ShmRef
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid


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

"""KServe v2 HTTP bodies: JSON tensors and Triton's binary tensor data extension.

Binary inputs are slices of the request body, kept as bytes; JSON inputs are converted to bytes
once, here. Responses put binary outputs after the JSON header, as Triton does.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.core.json_depth import check_json_depth
from gateway.core.request import (
    ParsedRequest,
    RequestedOutput,
    check_binary,
    check_parameters,
    check_shape,
)
from gateway.extensions.shm_params import REGION, ShmRef, shm_ref
from shared.wire import datatypes, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

HEADER_LENGTH = "inference-header-content-length"


class _InputJSON(msgspec.Struct):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] = {}
    data: Any = msgspec.UNSET


class _OutputJSON(msgspec.Struct):
    name: str
    parameters: dict[str, Any] = {}


class _RequestJSON(msgspec.Struct):
    inputs: list[_InputJSON]
    id: str = ""
    parameters: dict[str, Any] = {}
    outputs: list[_OutputJSON] = []


_decode_request = msgspec.json.Decoder(_RequestJSON).decode
_json = msgspec.json.Encoder()


def parse_infer_request(body: bytes, header_length: str | None) -> ParsedRequest:
    binary: bytes | memoryview  # the bytes after the JSON part: a view, not a copy
    if header_length is None:
        json_part, binary = body, b""
    else:
        try:
            length = int(header_length)
        except ValueError:
            raise invalid(
                f"Inference-Header-Content-Length must be an integer, got '{header_length}'"
            ) from None
        if not 0 <= length <= len(body):
            raise invalid(
                f"Inference-Header-Content-Length is {length} but the body has {len(body)} bytes"
            )
        if length == 0:
            return ParsedRequest("", [], [], {}, True, raw_body=body)
        json_part, binary = body[:length], memoryview(body)[length:]
    if not json_part:
        raise invalid("request body is empty; expected a JSON inference request")
    check_json_depth(json_part)
    try:
        request = _decode_request(json_part)
    except msgspec.ValidationError as exc:
        raise invalid(f"malformed inference request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise invalid(f"failed to parse the request JSON: {exc}") from None
    inputs: list[Tensor] = []
    offset = 0
    seen: set[str] = set()
    shm: dict[str, ShmRef] = {}
    for item in request.inputs:
        if item.name in seen:
            raise invalid(f"input '{item.name}' is given more than once")
        seen.add(item.name)
        if item.datatype not in datatypes.BY_NAME:
            raise invalid(
                f"input '{item.name}' has unknown datatype '{item.datatype}'; expected one of "
                f"{', '.join(datatypes.NAMES)}"
            )
        check_shape(item.name, item.shape, item.datatype)
        if item.parameters:  # the common case has none: no call, no f-string
            check_parameters(item.parameters, f"input '{item.name}'")
        size = item.parameters.get("binary_data_size")
        ref = shm_ref("input", item.name, item.parameters)
        if ref is not None:
            if size is not None or item.data is not msgspec.UNSET:
                raise invalid(_one_source(item.name, item.data is not msgspec.UNSET, size))
            shm[item.name] = ref
            data = b""
        elif size is not None:
            if item.data is not msgspec.UNSET:
                raise invalid(f"input '{item.name}' has both 'data' and 'binary_data_size'")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise invalid(f"input '{item.name}': binary_data_size must be an integer >= 0")
            if offset + size > len(binary):
                raise invalid(
                    f"input '{item.name}' declares binary_data_size {size} but only "
                    f"{len(binary) - offset} bytes of binary data remain"
                )
            data = bytes(binary[offset : offset + size])
            offset += size
            check_binary(item.name, item.datatype, item.shape, data)
        elif item.data is msgspec.UNSET:
            raise invalid(f"input '{item.name}' has neither 'data' nor 'binary_data_size'")
        else:
            data = tensors.json_to_bytes(item.data, item.datatype, item.shape, item.name)
        inputs.append(Tensor(item.name, item.datatype, list(item.shape), data))
    if offset != len(binary):
        raise invalid(
            f"the request has {len(binary) - offset} bytes of binary data that no input claims "
            "(check binary_data_size)"
        )
    if request.parameters:
        check_parameters(request.parameters, "the request")
    for output in request.outputs:
        if output.parameters:
            check_parameters(output.parameters, f"output '{output.name}'")
    binary_default = bool(request.parameters.get("binary_data_output", False))
    outputs = [
        RequestedOutput(
            o.name, bool(o.parameters.get("binary_data", binary_default)), dict(o.parameters)
        )
        for o in request.outputs
    ]
    params = {k: v for k, v in request.parameters.items() if k != "binary_data_output"}
    return ParsedRequest(request.id, inputs, outputs, params, binary_default, shm_inputs=shm)


def _one_source(name: str, has_data: bool, binary_size: Any) -> str:
    """Triton's text for an input that names more than one place its data is."""
    given = " 'data'" if has_data else ""
    given += " 'binary_data_size'" if binary_size is not None else ""
    return (
        f"Input must set only one of the following fields: 'data', 'binary_data_size' in "
        f"'parameters', '{REGION}' in 'parameters'. But set{given} '{REGION}' "
        f"(input '{name}')"
    )


def encode_infer_response(
    model: str,
    version: int,
    request_id: str,
    outputs: list[Tensor],
    binary: dict[str, bool],
    parameters: dict[str, Any] | None = None,
    in_shared_memory: frozenset[str] = frozenset(),
) -> tuple[bytes, int | None]:
    """The response body and, when any output is binary, the JSON header's length. Outputs
    written to shared memory are described without data."""
    out_json: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for tensor in outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": tensor.shape,
        }
        if tensor.name in in_shared_memory:
            pass
        elif binary.get(tensor.name, False):
            entry["parameters"] = {"binary_data_size": len(tensor.data)}
            blobs.append(tensor.data)
        else:
            entry["data"] = tensors.bytes_to_json(tensor.data, tensor.datatype)
        out_json.append(entry)
    body: dict[str, Any] = {"model_name": model, "model_version": str(version)}
    if request_id:
        body["id"] = request_id
    if parameters:
        body["parameters"] = parameters
    body["outputs"] = out_json
    header = _json.encode(body)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)

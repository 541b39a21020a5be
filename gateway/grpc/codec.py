"""KServe v2 gRPC messages <-> the data plane's request and reply.

``raw_input_contents`` are taken as they are (the binary path); typed ``contents`` go through the
same conversion as JSON data, so both protocols check counts and types identically. Outputs
always travel as ``raw_output_contents``, as Triton sends them.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import service_pb2

from gateway.core.request import ParsedRequest, RequestedOutput, check_binary, check_shape
from gateway.extensions.shm_params import ShmRef, shm_ref
from shared.wire import datatypes, sequence_params, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

_CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parameter_value(parameter: Any) -> Any:
    choice = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, choice) if choice else None


def parse_grpc_request(request: service_pb2.ModelInferRequest) -> ParsedRequest:
    raw = list(request.raw_input_contents)
    model = request.model_name
    shm: dict[str, ShmRef] = {}
    for item in request.inputs:
        ref = shm_ref("input", item.name, _parameters(item.parameters))
        if ref is not None:
            if item.HasField("contents"):
                raise invalid(
                    f"unexpected 'content' provided when using shared memory for input tensor "
                    f"'{item.name}' for model '{model}'"
                )
            shm[item.name] = ref
    inputs: list[Tensor] = []
    seen: set[str] = set()
    next_raw = 0
    for item in request.inputs:
        name, datatype, shape = item.name, item.datatype, list(item.shape)
        if name in seen:
            raise invalid(f"input '{name}' is given more than once")
        seen.add(name)
        if datatype not in datatypes.BY_NAME:
            raise invalid(
                f"input '{name}' has unknown datatype '{datatype}'; expected one of "
                f"{', '.join(datatypes.NAMES)}"
            )
        check_shape(name, shape, datatype)  # int64 by type; the element count they make is not
        if name in shm:
            data = b""
        elif raw:
            if item.HasField("contents"):
                raise invalid(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{model}'"
                )
            if next_raw >= len(raw):
                raise _raw_count(len(raw), len(request.inputs) - len(shm))
            data = raw[next_raw]
            next_raw += 1
            check_binary(name, datatype, shape, data)
        else:
            field = _CONTENTS.get(datatype)
            if field is None:
                raise invalid(f"input '{name}' of datatype {datatype} must use raw_input_contents")
            values = list(getattr(item.contents, field))
            data = tensors.json_to_bytes(values, datatype, shape, name)
        inputs.append(Tensor(name, datatype, shape, data))
    if raw and next_raw != len(raw):
        raise _raw_count(len(raw), len(request.inputs) - len(shm))
    parameters = _parameters(request.parameters)
    if (
        "sequence_id" in parameters
        or "sequence_start" in parameters
        or "sequence_end" in parameters
    ):
        _sequence_parameters(request.parameters, parameters)
    outputs = [RequestedOutput(o.name, True, _parameters(o.parameters)) for o in request.outputs]
    return ParsedRequest(
        request.id, inputs, outputs, parameters, binary_default=True, shm_inputs=shm
    )


def _raw_count(given: int, expected: int) -> Exception:
    return invalid(
        f"raw_input_contents has {given} entries but the request has {expected} inputs not in "
        "shared memory; expected one per input, in order"
    )


def _parameters(parameters: Any) -> dict[str, Any]:
    return {k: parameter_value(v) for k, v in parameters.items()}


def _sequence_parameters(given: Any, parameters: dict[str, Any]) -> None:
    """Triton's gRPC rules: the id an ``int64_param`` (read as Triton's uint64) or a
    ``string_param``, start and end ``bool_param``s."""
    for name in sequence_params.GRPC_CHOICES:
        if name in parameters:
            sequence_params.check_grpc_choice(name, given[name].WhichOneof("parameter_choice"))
    seq_id = parameters.get("sequence_id")
    if isinstance(seq_id, int) and seq_id < 0:
        parameters["sequence_id"] = seq_id + 2**64


def encode_grpc_response(
    model: str,
    version: int,
    request_id: str,
    outputs: list[Tensor],
    in_shared_memory: frozenset[str] = frozenset(),
    parameters: dict[str, Any] | None = None,
) -> service_pb2.ModelInferResponse:
    """Outputs written to shared memory get an empty raw content, as Triton sends them. The
    response's parameters (a Python model's) keep their type: bool, int64 or string."""
    response = service_pb2.ModelInferResponse(
        model_name=model, model_version=str(version), id=request_id
    )
    for key, value in (parameters or {}).items():
        if isinstance(value, bool):
            response.parameters[key].bool_param = value
        elif isinstance(value, int):
            response.parameters[key].int64_param = value
        else:
            response.parameters[key].string_param = str(value)
    for tensor in outputs:
        output = response.outputs.add()
        output.name = tensor.name
        output.datatype = tensor.datatype
        output.shape.extend(tensor.shape)
        response.raw_output_contents.append(b"" if tensor.name in in_shared_memory else tensor.data)
    return response

"""Triton's generate extension: a flat JSON object in, a flat JSON object out.

Request (``POST .../generate`` and ``.../generate_stream``): each key that names an input of the
model becomes that input (a scalar is a one-element tensor, an array keeps its length; the
datatype is the configuration's; a model with batching gets a batch of one); ``parameters``
(an object) and every other key with a scalar value become request parameters. Response: the
``model_name``, ``model_version`` and each output tensor as a key, its value the element itself
for a one-element tensor and a flat array otherwise (BYTES as UTF-8 strings).
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from gateway.core.json_depth import check_json_depth
from gateway.core.request import ParsedRequest
from gateway.rest.codec import parse_infer_request
from shared.model_config import ModelConfig
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid

_SCALARS = (str, int, float, bool)


def parse_generate_request(config: ModelConfig, body: bytes) -> ParsedRequest:
    try:
        check_json_depth(body, "the generate request")
        request = msgspec.json.decode(body) if body else None
    except msgspec.DecodeError as exc:
        raise invalid(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(request, dict):
        raise invalid("the generate request must be a JSON object (input names and parameters)")
    parameters = request.pop("parameters", None) or {}
    if not isinstance(parameters, dict):
        raise invalid("'parameters' of a generate request must be a JSON object")
    inputs: list[dict[str, Any]] = []
    for key, value in request.items():
        spec = config.input(key)
        if spec is None:
            if not isinstance(value, _SCALARS):
                raise invalid(
                    f"generate request key '{key}' is not an input of model '{config.name}' "
                    f"(inputs: {config.input_names}) and its value is not a string, number or "
                    "boolean, so it cannot be a parameter either"
                )
            parameters[key] = value
            continue
        data = value if isinstance(value, list) else [value]
        shape = [len(data)]
        if config.max_batch_size > 0:
            shape = [1, *shape]
        inputs.append({"name": key, "shape": shape, "datatype": spec.datatype, "data": data})
    body = msgspec.json.encode({"inputs": inputs, "parameters": parameters})
    return parse_infer_request(body, None)


def generate_response(model: str, version: int, outputs: list[Tensor]) -> dict[str, Any]:
    response: dict[str, Any] = {"model_name": model, "model_version": str(version)}
    for tensor in outputs:
        array = tensors.to_numpy(tensor).reshape(-1)
        values = [_json_value(item) for item in array.tolist()]
        response[tensor.name] = values[0] if len(values) == 1 else values
    return response


def _json_value(item: Any) -> Any:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    if isinstance(item, np.generic):
        return item.item()
    return item

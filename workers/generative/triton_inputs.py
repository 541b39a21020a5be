"""A Triton request to the generative model → (prompt, sampling parameters, output options).

Names and precedence follow Triton's vLLM backend: the request's parameters (the generate
extension puts extra JSON keys there), then the ``sampling_parameters`` input (a JSON string),
then the scalar inputs (``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``), each
overriding the one before. Pure: takes the ``pb_utils`` module and the request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from workers.generative.params import ParameterError, SamplingParams, sampling_params

SAMPLING_NAMES = ("max_tokens", "temperature", "top_p", "seed", "stop")
FLAG_NAMES = (
    "stream",
    "exclude_input_in_output",
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
)


@dataclass(frozen=True)
class GenerateOptions:
    prompt: str
    params: SamplingParams
    # One response per token (else one response with the whole text).
    stream: bool = False
    # Without streaming, the prompt is returned before the generated text unless this is set.
    exclude_input_in_output: bool = False
    return_finish_reason: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False


def _text(value: Any, name: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ParameterError(f"'{name}' must be UTF-8 text") from None
    return str(value)


def _scalar(pb_utils: Any, request: Any, name: str) -> tuple[bool, Any]:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return False, None
    values = tensor.as_numpy().reshape(-1)
    if name == "stop":
        return True, [_text(v, name) for v in values]
    if values.size != 1:
        raise ParameterError(f"input '{name}' must hold one value, got {values.size}")
    value = values[0]
    return True, _text(value, name) if isinstance(value, bytes) else value.item()


def _flag(value: Any, name: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool | int):
        raise ParameterError(f"'{name}' must be a boolean, got {value!r}")
    return bool(value)


def read_request(pb_utils: Any, request: Any) -> GenerateOptions:
    found, prompt = _scalar(pb_utils, request, "text_input")
    if not found:
        raise ParameterError("input 'text_input' is required: the prompt, one string")
    values: dict[str, Any] = {}
    raw = request.parameters() or "{}"
    parameters = json.loads(raw) if isinstance(raw, str) else dict(raw)
    values.update({k: v for k, v in parameters.items() if k in SAMPLING_NAMES + FLAG_NAMES})
    found, sampling = _scalar(pb_utils, request, "sampling_parameters")
    if found:
        try:
            extra = json.loads(sampling)
        except ValueError:
            raise ParameterError("input 'sampling_parameters' must be a JSON object") from None
        if not isinstance(extra, dict):
            raise ParameterError("input 'sampling_parameters' must be a JSON object")
        values.update(extra)
    for name in SAMPLING_NAMES + FLAG_NAMES:
        found, value = _scalar(pb_utils, request, name)
        if found:
            values[name] = value
    params = sampling_params({k: values.get(k) for k in SAMPLING_NAMES})
    flags = {name: _flag(values[name], name) for name in FLAG_NAMES if name in values}
    return GenerateOptions(_text(prompt, "text_input"), params, **flags)

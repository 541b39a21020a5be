"""Check a parsed request against the model's configuration before anything is enqueued.

Messages follow Triton's wording where Triton has one, and always name the input or output,
what was given and what the model expects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.core.request import ParsedRequest, RequestedOutput
from shared.model_config import ModelConfig
from shared.model_config.input_check import check_inputs
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import invalid


# Not frozen: one is built per request, and a frozen dataclass's __init__ sets each field through
# object.__setattr__ (twice the cost).
@dataclass(slots=True)
class ValidRequest:
    inputs: list[Tensor]
    outputs: list[RequestedOutput]
    batch_size: int
    # The inputs' shapes without the batch dimension: requests with equal signatures batch.
    shape_sig: str


def validate(config: ModelConfig, parsed: ParsedRequest) -> ValidRequest:
    if parsed.raw_body is not None:
        parsed = _from_raw_body(config, parsed)
    model = config.name
    ordered, batch_size, shape_sig = _checked_inputs(config, parsed.inputs)
    for output in parsed.outputs:
        if config.output(output.name) is None:
            raise invalid(
                f"unexpected inference output '{output.name}' for model '{model}'; expected "
                f"outputs: {config.output_names}"
            )
    if len({o.name for o in parsed.outputs}) != len(parsed.outputs):
        raise invalid(f"an output of model '{model}' is requested more than once")
    return ValidRequest(ordered, parsed.outputs, batch_size, shape_sig)


# model name -> (its config object, (name, datatype, *shape) of each input -> the positions of
# the inputs in the config's order, the batch size, the shape signature).
_Plan = tuple[tuple[int, ...], int, str]
_checked: dict[str, tuple[ModelConfig, dict[tuple[tuple[Any, ...], ...], _Plan]]] = {}
# Distinct input signatures remembered per config (clients send a handful of shapes).
_MAX_SIGNATURES = 256


def _checked_inputs(config: ModelConfig, inputs: list[Tensor]) -> tuple[list[Tensor], int, str]:
    """``check_inputs``, remembered per config for inputs of the same names, datatypes and
    shapes: its answer depends on nothing else, and a model's requests nearly all look alike.
    A refusal is never remembered (it raises every time)."""
    entry = _checked.get(config.name)
    if entry is None or entry[0] is not config:
        entry = _checked[config.name] = (config, {})
    plans = entry[1]
    signature = tuple((t.name, t.datatype, *t.shape) for t in inputs)
    plan = plans.get(signature)
    if plan is None:
        ordered, batch_size, shape_sig = check_inputs(config, inputs)
        if len(plans) >= _MAX_SIGNATURES:
            plans.clear()
        order = tuple(next(i for i, t in enumerate(inputs) if t is o) for o in ordered)
        plans[signature] = (order, batch_size, shape_sig)
        return ordered, batch_size, shape_sig
    order, batch_size, shape_sig = plan
    return [inputs[i] for i in order], batch_size, shape_sig


def _from_raw_body(config: ModelConfig, parsed: ParsedRequest) -> ParsedRequest:
    """Triton's raw binary request: one input, batch 1, every output returned binary."""
    if len(config.inputs) != 1:
        raise invalid(
            f"a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
            f"exactly one input; '{config.name}' has {len(config.inputs)}"
        )
    spec = config.inputs[0]
    if any(d < 0 for d in spec.dims):
        raise invalid(
            f"a raw binary request needs fixed dims; input '{spec.name}' of '{config.name}' "
            f"has {spec.dims}"
        )
    shape = ([1] if config.max_batch_size > 0 else []) + list(spec.dims)
    data = parsed.raw_body or b""
    expected = tensors.expected_byte_size(spec.datatype, shape)
    if expected is not None and expected != len(data):
        raise invalid(
            f"raw binary request has {len(data)} bytes but input '{spec.name}' of shape "
            f"{shape} ({spec.datatype}) needs {expected}"
        )
    return ParsedRequest(
        id="",
        inputs=[Tensor(spec.name, spec.datatype, shape, data)],
        outputs=[RequestedOutput(o.name, True) for o in config.outputs],
        parameters={},
        binary_default=True,
    )

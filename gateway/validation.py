"""Check a parsed request against the model's configuration before anything is enqueued.

Messages follow Triton's wording where Triton has one, and always name the input or output,
what was given and what the model expects.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.http_codec import ParsedRequest, RequestedOutput
from shared import tensors
from shared.envelope import Tensor
from shared.errors import invalid
from shared.model_config import ModelConfig, TensorSpec


@dataclass(frozen=True)
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
    given = {t.name: t for t in parsed.inputs}
    for name in given:
        if config.input(name) is None:
            raise invalid(
                f"unexpected inference input '{name}' for model '{model}'; expected inputs: "
                f"{config.input_names}"
            )
    required = [spec.name for spec in config.inputs if not spec.optional]
    missing = [name for name in required if name not in given]
    if missing:
        raise invalid(
            f"expected {len(required)} inputs but got {len(given)} inputs for model '{model}'. "
            f"Got input(s) {sorted(given)}, but missing required input(s) {missing}. "
            f"Please provide all required input(s)."
        )
    batch_size = 1
    batch_sizes: set[int] = set()
    ordered: list[Tensor] = []
    sig_parts: list[str] = []
    for spec in config.inputs:
        tensor = given.get(spec.name)
        if tensor is None:
            continue
        if tensor.datatype != spec.datatype:
            raise invalid(
                f"inference input '{spec.name}' data-type is '{tensor.datatype}', but model "
                f"'{model}' expects '{spec.datatype}'"
            )
        dims = _check_shape(config, spec, tensor.shape)
        if config.max_batch_size > 0:
            batch_sizes.add(tensor.shape[0])
        ordered.append(tensor)
        sig_parts.append(f"{spec.name}:{','.join(map(str, dims))}")
    if config.max_batch_size > 0:
        if len(batch_sizes) > 1:
            raise invalid(
                f"inputs of model '{model}' disagree on the batch size (first dimension): "
                f"{sorted(batch_sizes)}; every input must have the same batch size"
            )
        batch_size = batch_sizes.pop() if batch_sizes else 1
        if batch_size > config.max_batch_size:
            raise invalid(
                f"inference request batch-size must be <= {config.max_batch_size} for "
                f"'{model}', got {batch_size}"
            )
        if batch_size < 1:
            raise invalid(f"inference request batch-size must be >= 1 for '{model}', got 0")
    for output in parsed.outputs:
        if config.output(output.name) is None:
            raise invalid(
                f"unexpected inference output '{output.name}' for model '{model}'; expected "
                f"outputs: {config.output_names}"
            )
    if len({o.name for o in parsed.outputs}) != len(parsed.outputs):
        raise invalid(f"an output of model '{model}' is requested more than once")
    return ValidRequest(ordered, parsed.outputs, batch_size, "|".join(sig_parts))


def _check_shape(config: ModelConfig, spec: TensorSpec, shape: list[int]) -> list[int]:
    """The shape without the batch dimension, after checking it against the config's dims."""
    expected = ([-1] if config.max_batch_size > 0 else []) + list(spec.dims)
    dims = shape[1:] if config.max_batch_size > 0 else shape
    ok = len(shape) == len(expected) and all(
        e == -1 or e == s for e, s in zip(expected, shape, strict=True)
    )
    if not ok:
        raise invalid(
            f"unexpected shape for input '{spec.name}' for model '{config.name}'. Expected "
            f"{_fmt(expected)}, got {_fmt(shape)}"
        )
    return dims


def _fmt(shape: list[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


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

"""The configuration's tensors matched to an OpenVINO model's ports, and the model prepared for
them: element types converted, the batch dimension made dynamic, shapes checked.

Triton's openvino_backend does the same at load (``ValidateInputs``/``ValidateOutputs``): a
tensor is found by the port's tensor name (any of its names), each port's element type is set to
the configuration's ``data_type`` with a pre/post-processing step (so an FP32 model can serve an
FP16 input, converted inside the compiled graph), and a model that does not fit the
configuration fails to load, naming the tensor and both shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import openvino as ov
from openvino.preprocess import PrePostProcessor

from shared.model_config import ModelConfig, TensorSpec
from shared.wire.errors import ConchError, ErrorCode
from workers.openvino.parameters import OpenVinoOptions

# KServe v2 datatype -> OpenVINO element type name (ov.Type attribute).
V2_TO_OV = {
    "BOOL": "boolean",
    "UINT8": "u8",
    "UINT16": "u16",
    "UINT32": "u32",
    "UINT64": "u64",
    "INT8": "i8",
    "INT16": "i16",
    "INT32": "i32",
    "INT64": "i64",
    "FP16": "f16",
    "FP32": "f32",
    "FP64": "f64",
}
# OpenVINO element type name -> Triton's config.pbtxt data_type (auto-complete).
OV_TO_CONFIG = {ov_name: f"TYPE_{v2}" for v2, ov_name in V2_TO_OV.items()}


def port_names(port: Any) -> set[str]:
    """Every name a port answers to: its tensor names, then its node's friendly name."""
    names = set(port.get_names())
    names.add(port.get_node().get_friendly_name())
    return names


def ov_type(model: str, kind: str, spec: TensorSpec) -> Any:
    """The OpenVINO element type of a configured tensor; BYTES and BF16 are refused."""
    name = V2_TO_OV.get(spec.datatype)
    if name is None:
        why = (
            "OpenVINO has no string tensors; decode text in a Python model or ensemble step "
            "before this model"
            if spec.datatype == "BYTES"
            else f"expected one of {', '.join('TYPE_' + t for t in V2_TO_OV)}"
        )
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"unsupported datatype TYPE_{'STRING' if spec.datatype == 'BYTES' else spec.datatype}"
            f" for {kind} '{spec.name}' for model '{model}': {why}",
        )
    return getattr(ov.Type, name)


def match(model: str, kind: str, specs: Sequence[TensorSpec], ports: Sequence[Any]) -> list[int]:
    """The index of each configured tensor among the model's ports, by name."""
    indices: list[int] = []
    for spec in specs:
        found = [i for i, port in enumerate(ports) if spec.name in port_names(port)]
        if not found:
            available = sorted(port.get_any_name() for port in ports)
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"unable to load model '{model}', configuration {kind} '{spec.name}' is not a "
                f"model {kind}; the model's {kind}s are {available}",
            )
        indices.append(found[0])
    return indices


def prepare(
    config: ModelConfig, model: Any, options: OpenVinoOptions
) -> tuple[Any, list[int], list[int]]:
    """The model ready to compile for ``config``, and its input and output port indices in the
    configuration's order."""
    name = config.name
    if len(config.inputs) != len(model.inputs):
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"unable to load model '{name}', configuration expects {len(config.inputs)} inputs, "
            f"model provides {len(model.inputs)}",
        )
    inputs = match(name, "input", config.inputs, model.inputs)
    outputs = match(name, "output", config.outputs, model.outputs)
    ppp = PrePostProcessor(model)
    for spec, index in zip(config.inputs, inputs, strict=True):
        ppp.input(index).tensor().set_element_type(ov_type(name, "input", spec))
    for spec, index in zip(config.outputs, outputs, strict=True):
        ppp.output(index).tensor().set_element_type(ov_type(name, "output", spec))
    model = ppp.build()
    shapes = {
        index: _input_shape(config, spec, model.inputs[index].get_partial_shape(), options)
        for spec, index in zip(config.inputs, inputs, strict=True)
    }
    try:
        model.reshape(shapes)
    except RuntimeError as exc:
        hint = (
            "; set the parameter SKIP_OV_DYNAMIC_BATCHSIZE to YES for a model whose batch "
            "dimension cannot change"
            if config.max_batch_size > 0 and not options.skip_dynamic_batch
            else ""
        )
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"unable to load model '{name}': OpenVINO cannot reshape its inputs to "
            f"{ {str(i): str(s) for i, s in shapes.items()} }: {reason(exc)}{hint}",
        ) from exc
    for spec, index in zip(config.outputs, outputs, strict=True):
        _check_dims(config, spec, model.outputs[index].get_partial_shape())
    return model, inputs, outputs


def _input_shape(
    config: ModelConfig, spec: TensorSpec, shape: Any, options: OpenVinoOptions
) -> Any:
    batched = config.max_batch_size > 0
    dims = spec.reshape if spec.reshape is not None else spec.dims
    if options.reshape_io_layers:
        shape = ov.PartialShape(
            ([ov.Dimension()] if batched else [])
            + [ov.Dimension(d) if d > 0 else ov.Dimension() for d in dims]
        )
    else:
        _check_dims(config, spec, shape)
    if batched:
        dims_list = list(shape)
        dims_list[0] = (
            ov.Dimension(config.max_batch_size)
            if options.skip_dynamic_batch
            else ov.Dimension(1, config.max_batch_size)
        )
        shape = ov.PartialShape(dims_list)
    return shape


def _check_dims(config: ModelConfig, spec: TensorSpec, shape: Any) -> None:
    """The model's shape fits the configuration's dims (Triton's ``CompareDimsSupported``)."""
    batched = config.max_batch_size > 0
    dims = list(spec.reshape if spec.reshape is not None else spec.dims)
    full = ([config.max_batch_size] if batched else []) + dims
    model_dims = list(shape) if shape.rank.is_static else []
    fits = shape.rank.is_static and len(model_dims) == len(full)
    if fits:
        for i, (have, want) in enumerate(zip(model_dims, full, strict=True)):
            if (batched and i == 0) or want == -1 or have.is_dynamic:
                continue
            fits = fits and have.get_length() == want
    if not fits:
        shown = [d.get_length() if d.is_static else -1 for d in model_dims]
        lead = (
            "an initial batch dimension because max_batch_size > 0 followed by the explicit "
            "tensor shape, making complete "
            if batched
            else ""
        )
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{config.name}', tensor '{spec.name}': the model expects "
            f"{len(model_dims)} dimensions (shape {shown}) but the model configuration "
            f"specifies {len(full)} dimensions ({lead}shape {full})",
        )


def reason(exc: BaseException) -> str:
    """OpenVINO's exception text ends with the reason, after lines of source locations."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__

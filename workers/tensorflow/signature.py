"""Triton's rules for a SavedModel's signature, without TensorFlow: which signature serves,
how the configuration is auto-completed from it, and whether the configuration matches it.

Kept free of ``import tensorflow`` (seconds and hundreds of MB) so the rules are plain data in,
data out; ``workers.tensorflow.backend`` reads the signature off the SavedModel and calls them.
The behaviour follows triton-inference-server/tensorflow_backend (``AutoCompleteHelper``,
``ValidateTRITONTFModel``, ``TRITONTF_ModelCreateFromSavedModel``) and keeps its error texts.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode

DEFAULT_SIGNATURE = "serving_default"
# Triton's --backend-config=tensorflow,default-max-batch-size: what auto-complete sets
# max_batch_size to when the signature can batch and the configuration leaves it 0.
DEFAULT_MAX_BATCH_SIZE = 4
# Signatures that are never the serving one (TensorFlow's own keys).
_NOT_SERVING = {"__saved_model_init_op", "__saved_model_train_op"}

# TensorFlow's DataType names -> KServe v2 names (the config's TYPE_<name>, BYTES: TYPE_STRING).
DATATYPES = {
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_HALF": "FP16",
    "DT_BFLOAT16": "BF16",
    "DT_BOOL": "BOOL",
    "DT_STRING": "BYTES",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
}


@dataclass(frozen=True)
class SignatureTensor:
    """One input or output of a signature: its key (the name the configuration uses), the graph
    tensor it stands for, its KServe datatype and its shape (-1: any; None: rank unknown)."""

    key: str
    tensor_name: str
    datatype: str
    shape: list[int] | None

    @property
    def rank(self) -> int:
        return len(self.shape) if self.shape is not None else 0

    def config_type(self) -> str:
        return "TYPE_STRING" if self.datatype == "BYTES" else f"TYPE_{self.datatype}"


@dataclass(frozen=True)
class Signature:
    key: str
    inputs: dict[str, SignatureTensor]
    outputs: dict[str, SignatureTensor]

    def supports_batch(self) -> bool:
        """Triton's ``ModelSupportsBatch``: every tensor of known rank starts with -1."""
        tensors = [*self.inputs.values(), *self.outputs.values()]
        return all(t.rank == 0 or (t.shape or [0])[0] == -1 for t in tensors)


def choose_signature(model: str, available: list[str], requested: str) -> str:
    """``TF_SIGNATURE_DEF`` if named; else ``serving_default``, or failing that the first
    signature that is not TensorFlow's init or train op (Triton's fallback, with a warning)."""
    wanted = requested or DEFAULT_SIGNATURE
    if wanted in available:
        return wanted
    if not requested:
        for key in available:
            if key not in _NOT_SERVING:
                return key
    raise ConchError(
        ErrorCode.INVALID_ARG,
        f"unable to load model '{model}', expected '{wanted}' signature; the SavedModel has "
        f"{sorted(k for k in available if k not in _NOT_SERVING)} (name one with the "
        "TF_SIGNATURE_DEF parameter)",
    )


def auto_complete(
    config: ModelConfig, signature: Signature, default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
) -> dict[str, Any]:
    """The configuration (JSON form) completed from the signature as Triton's
    ``AutoCompleteHelper::Fix`` does: max_batch_size, inputs, outputs, dynamic batching."""
    completed = copy.deepcopy(config.json)
    batching = _batching(config, signature, default_max_batch_size)
    if config.max_batch_size == 0:
        completed["max_batch_size"] = default_max_batch_size if batching else 0
    batch_size = int(completed["max_batch_size"])
    listed = {spec["name"] for spec in completed.get("input", [])}
    listed |= {t for entry in completed.get("batch_input", []) for t in entry["target_name"]}
    controls = (completed.get("sequence_batching") or {}).get("control_input", [])
    listed |= {control["name"] for control in controls}
    inputs = [
        _fill(config.name, spec, signature.inputs, batching) for spec in completed.get("input", [])
    ]
    inputs += [
        _fill(config.name, {}, signature.inputs, batching, tensor)
        for key, tensor in signature.inputs.items()
        if key not in listed
    ]
    completed["input"] = inputs
    outputs = completed.get("output") or []
    if outputs:  # only the outputs listed are completed; the others are not served
        completed["output"] = [_fill(config.name, s, signature.outputs, batching) for s in outputs]
    else:
        completed["output"] = [
            _fill(config.name, {}, signature.outputs, batching, t)
            for t in signature.outputs.values()
        ]
    scheduled = "dynamic_batching" in completed or "sequence_batching" in completed
    if batch_size > 1 and not scheduled:
        completed["dynamic_batching"] = {}
    return completed


def _batching(config: ModelConfig, signature: Signature, default_max_batch_size: int) -> bool:
    """Whether the model batches: the signature must allow it; the configuration's own dims,
    where it lists any, say whether they leave the batch dimension out (Triton's hints)."""
    supports = signature.supports_batch()
    if not supports and config.max_batch_size > 0:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"unable to autofill for '{config.name}', configuration specified max-batch "
            f"{config.max_batch_size} but model signature does not support batching",
        )
    if not supports:
        return False
    listed = [(spec, signature.inputs) for spec in config.inputs]
    listed += [(spec, signature.outputs) for spec in config.outputs]
    if not listed:
        return default_max_batch_size > 0
    hint, explicit = False, None
    for spec, tensors in listed:
        if spec.allow_ragged_batch:
            hint, explicit = True, None
            break
        tensor = tensors.get(spec.name)
        if tensor is None or tensor.rank == 0:
            continue
        dims = spec.reshape if spec.reshape is not None else spec.dims
        if not dims:
            hint = hint or explicit is None
            continue
        says = len(dims) == tensor.rank - 1
        if explicit is not None and explicit != says:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"unable to autofill for '{config.name}', model tensor configurations are "
                "contradicting each other in terms of whether batching is supported",
            )
        explicit = says
        hint = says
    return hint and default_max_batch_size > 0


def _fill(
    model: str,
    spec: dict[str, Any],
    tensors: dict[str, SignatureTensor],
    batching: bool,
    tensor: SignatureTensor | None = None,
) -> dict[str, Any]:
    """One input/output entry with its datatype and dims filled where missing."""
    entry = dict(spec)
    tensor = tensor or tensors.get(entry.get("name", ""))
    if tensor is None:  # not in the signature: the load's check names it
        return entry
    entry.setdefault("name", tensor.key)
    if entry.get("data_type", "TYPE_INVALID") == "TYPE_INVALID":
        entry["data_type"] = tensor.config_type()
    if not entry.get("dims"):
        if tensor.shape is None or tensor.rank == 0:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"Unable to autofill for '{model}': the rank of model tensor '{tensor.key}' is "
                "0 and dimensions are not defined",
            )
        dims = tensor.shape[1:] if batching else list(tensor.shape)
        if not dims:  # a [batch] tensor: Triton's dims [1] with an empty reshape
            dims = [1]
            entry["reshape"] = {"shape": []}
        entry["dims"] = dims
    return entry


def check_config(config: ModelConfig, signature: Signature) -> None:
    """Triton's ``ValidateTRITONTFModel``: every configured input and output is a key of the
    signature, of the same datatype, with dims the signature's shape allows (inputs may narrow
    a -1; outputs must match exactly). Sequence controls and batch inputs are inputs too."""
    batched = config.max_batch_size > 0
    for kind, specs, tensors, exact in (
        ("input", config.inputs, signature.inputs, False),
        ("output", config.outputs, signature.outputs, True),
    ):
        for spec in specs:
            tensor = tensors.get(spec.name)
            if tensor is None:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"unexpected inference {kind} '{spec.name}' for model '{config.name}': "
                    f"signature '{signature.key}' has {kind}s {sorted(tensors)}",
                )
            if tensor.datatype != spec.datatype:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"unable to load model '{config.name}', configuration expects datatype "
                    f"TYPE_{spec.datatype} for {kind} '{spec.name}', model provides "
                    f"{tensor.config_type()}",
                )
            scattered = any(spec.name in b.target_name for b in config.batch_outputs)
            if tensor.shape is None or not tensor.shape or scattered or spec.allow_ragged_batch:
                continue
            dims = spec.reshape if spec.reshape is not None else spec.dims
            _compare_dims(config.name, spec.name, tensor.shape, dims, batched, exact)


def _compare_dims(
    model: str, name: str, shape: list[int], dims: list[int], batched: bool, exact: bool
) -> None:
    if batched and shape[0] != -1:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{model}', tensor '{name}': for the model to support batching the shape "
            "should have at least 1 dimension and the first dimension must be -1; but shape "
            f"expected by the model is {shape}",
        )
    full = [-1, *dims] if batched else list(dims)
    fits = len(shape) == len(full) and all(
        m == c or (not exact and m == -1) for m, c in zip(shape, full, strict=True)
    )
    if not fits:
        because = (
            " (an initial batch dimension because max_batch_size > 0 followed by the "
            "explicit tensor shape, making complete shape "
            if batched
            else " (shape "
        )
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{model}', tensor '{name}': the model expects {len(shape)} dimensions "
            f"(shape {shape}) but the model configuration specifies {len(full)} dimensions"
            f"{because}{full})",
        )

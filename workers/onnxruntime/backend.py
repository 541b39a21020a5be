"""ONNX Runtime: CPU by default, CUDA (and TensorRT) execution providers for GPU instances.

Whether a GPU is really used is read from the providers the session ended up with, never from
``onnxruntime.get_device()``, which says "GPU" for the GPU build on a machine without one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance
from workers.loading.auto_complete import complete_tensors

log = logging.getLogger(__name__)

GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider")


# ONNX Runtime's element type names -> Triton's config.pbtxt names.
_CONFIG_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
    **{f"tensor({t})": f"TYPE_{t.upper()}" for t in ("int8", "int16", "int32", "int64")},
    **{f"tensor({t})": f"TYPE_{t.upper()}" for t in ("uint8", "uint16", "uint32", "uint64")},
}


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """Inputs and outputs the configuration leaves out, read from the graph (Triton's
        onnxruntime backend does the same); the batch dimension is left out of ``dims`` when
        ``max_batch_size`` > 0."""
        if (config.inputs and config.outputs) or not model_file.is_file():
            return None
        session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
        return complete_tensors(config, session.get_inputs(), session.get_outputs(), _tensor_config)

    def load(self, spec: LoadSpec) -> ModelInstance:
        if not spec.model_file.is_file():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"model '{spec.config.name}' version {spec.version}: no file "
                f"'{spec.model_file}' (expected an ONNX model)",
            )
        return OnnxRuntimeInstance(spec)


def _tensor_config(node: Any, batched: bool, model: str) -> dict[str, Any]:
    data_type = _CONFIG_TYPES.get(node.type)
    if data_type is None:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{model}': cannot auto-complete '{node.name}' of ONNX type {node.type}; "
            "list it in config.pbtxt",
        )
    dims = [d if isinstance(d, int) and d >= 0 else -1 for d in node.shape]
    return {"name": node.name, "data_type": data_type, "dims": dims[1:] if batched else dims}


def session_options(parameters: dict[str, str]) -> ort.SessionOptions:
    """One thread per instance and no spin-waiting unless the config asks otherwise.

    A mesh node runs gateways, a scheduler and workers side by side; ONNX Runtime's defaults (a
    thread per core, spinning between ops) would take every core from them. Parallelism comes
    from ``instance_group { count }`` instead, as it does in Triton.
    """
    options = ort.SessionOptions()
    # Triton's onnxruntime backend parameter names.
    options.intra_op_num_threads = int(parameters.get("intra_op_thread_count", 1))
    if "inter_op_thread_count" in parameters:
        options.inter_op_num_threads = int(parameters["inter_op_thread_count"])
    spinning = parameters.get("allow_spinning", "0")
    options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    options.add_session_config_entry("session.inter_op.allow_spinning", spinning)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def providers_for(spec: LoadSpec) -> list[Any]:
    """Providers to ask for: GPU ones for KIND_GPU/KIND_AUTO where the build offers them."""
    kind = spec.instance_group.kind
    available = ort.get_available_providers()
    if kind == "KIND_CPU" or (spec.device == "cpu" and kind != "KIND_GPU"):
        return ["CPUExecutionProvider"]
    providers: list[Any] = []
    accelerators = (spec.config.optimization or {}).get("execution_accelerators", {})
    for accel in accelerators.get("gpu_execution_accelerator", []):
        if accel.get("name") == "tensorrt" and "TensorrtExecutionProvider" in available:
            options = {"device_id": spec.device_id}
            options.update(_trt_options(accel.get("parameters", {})))
            providers.append(("TensorrtExecutionProvider", options))
    if "CUDAExecutionProvider" in available:
        providers.append(("CUDAExecutionProvider", {"device_id": spec.device_id}))
    providers.append("CPUExecutionProvider")
    return providers


def _trt_options(parameters: dict[str, str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if parameters.get("precision_mode", "").upper() == "FP16":
        options["trt_fp16_enable"] = True
    if "max_workspace_size_bytes" in parameters:
        options["trt_max_workspace_size"] = int(parameters["max_workspace_size_bytes"])
    return options


class OnnxRuntimeInstance(TensorModelInstance):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec.config)
        requested = providers_for(spec)
        self.session = ort.InferenceSession(
            str(spec.model_file),
            sess_options=session_options(spec.config.parameters),
            providers=requested,
        )
        used = self.session.get_providers()
        self.on_gpu = any(p in used for p in GPU_PROVIDERS)
        if spec.instance_group.kind == "KIND_GPU" and not self.on_gpu:
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"model '{spec.config.name}' asks for KIND_GPU instances but ONNX Runtime could "
                f"not use a GPU here (session providers: {used})",
            )
        log.info(
            "onnxruntime session ready",
            extra={"model": spec.config.name, "version": spec.version, "providers": used},
        )
        self._input_types = {i.name: i.type for i in self.session.get_inputs()}

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        feed = {name: _feedable(array) for name, array in inputs.items()}
        values = self.session.run(output_names, feed)
        return dict(zip(output_names, values, strict=True))

    def unload(self) -> None:
        del self.session


def _feedable(array: np.ndarray) -> np.ndarray:
    """ONNX Runtime takes BYTES tensors as numpy string/object arrays of str."""
    if array.dtype == object:
        decoded: np.ndarray = np.vectorize(lambda b: b.decode("utf-8", "replace"), otypes=[object])(
            array
        )
        return decoded
    return array

"""TensorRT backend: serialized engines (``model.plan``) through the ``tensorrt`` Python API.

Device memory and streams come from torch (``torch.cuda``): it is already the pytorch worker's
dependency, its caching allocator makes per-batch output buffers cheap, and it avoids a third
CUDA binding (cuda-python, pycuda) for a few allocations and copies. Each instance owns one
execution context and one CUDA stream, so ``count: 2`` runs two batches on the GPU at once.
Shapes are dynamic through optimization profiles: the instance group's first ``profile`` entry
(Triton's field), else profile 0; ``set_input_shape`` per batch, outputs sized from the context.
``tensorrt`` and ``torch`` are imported only when a model loads, so ``check_host`` can say in one
line what is missing on a machine without them.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from shared.runtime import gpu
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance

log = logging.getLogger(__name__)


def host_problems() -> list[str]:
    """What this host lacks to run engines: an NVIDIA GPU, tensorrt, torch with CUDA."""
    problems: list[str] = []
    if gpu.gpu_count() == 0:
        problems.append("no NVIDIA GPU is visible")
    try:
        import tensorrt  # noqa: F401
    except Exception as exc:  # ImportError, or OSError for a missing libnvinfer
        problems.append(f"the 'tensorrt' Python package cannot be imported ({exc})")
    try:
        import torch
    except ImportError:
        problems.append("torch (used for CUDA buffers and streams) is not installed")
    else:
        if not problems and not torch.cuda.is_available():
            problems.append(f"torch {torch.__version__} cannot use CUDA (a CPU-only build?)")
    return problems


class TensorRTBackend(Backend):
    name = "tensorrt"

    def check_host(self) -> None:
        problems = host_problems()
        if problems:
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                "the tensorrt backend cannot run on this host: " + "; ".join(problems),
            )

    def load(self, spec: LoadSpec) -> ModelInstance:
        if spec.instance_group.kind == "KIND_CPU":
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{spec.config.name}': TensorRT engines run on GPUs only; "
                "instance_group kind KIND_CPU is not supported (use KIND_GPU)",
            )
        self.check_host()
        if not spec.model_file.is_file():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"model '{spec.config.name}' version {spec.version}: no file "
                f"'{spec.model_file}' (expected a serialized TensorRT engine)",
            )
        return TensorRTInstance(spec)


def profile_index(spec: LoadSpec) -> int:
    """The instance group's first ``profile`` (Triton's field), else 0."""
    for group in spec.config.to_json().get("instance_group", []):
        if group.get("name") == spec.instance_group.name and group.get("profile"):
            return int(group["profile"][0])
    return 0


class TensorRTInstance(TensorModelInstance):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec.config)
        import tensorrt as trt
        import torch

        self.torch = torch
        self.device = torch.device("cuda", spec.device_id)
        self.profile = profile_index(spec)
        with torch.cuda.device(self.device):
            self.runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
            self.engine = self.runtime.deserialize_cuda_engine(spec.model_file.read_bytes())
            if self.engine is None:
                raise ConchError(
                    ErrorCode.INTERNAL,
                    f"model '{spec.config.name}': TensorRT {trt.__version__} could not "
                    f"deserialize '{spec.model_file}' (built with another TensorRT version or "
                    "for another GPU? rebuild it on this machine)",
                )
            self.context = self.engine.create_execution_context()
            self.stream = torch.cuda.Stream(self.device)
            if not 0 <= self.profile < self.engine.num_optimization_profiles:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{spec.config.name}': profile {self.profile} asked for, the engine "
                    f"has {self.engine.num_optimization_profiles}",
                )
            self.context.set_optimization_profile_async(self.profile, self.stream.cuda_stream)
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.dtypes: dict[str, Any] = {}
        for index in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(index)
            is_input = self.engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            (self.inputs if is_input else self.outputs).append(name)
            np_dtype = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))
            self.dtypes[name] = (np_dtype, torch.from_numpy(np.empty(0, np_dtype)).dtype)
        self._check_names(spec)
        self._check_shape_tensors(spec)
        log.info(
            "tensorrt engine ready",
            extra={"model": spec.config.name, "device": str(self.device), "profile": self.profile},
        )

    def _check_names(self, spec: LoadSpec) -> None:
        for kind, wanted, present in (
            ("input", spec.config.input_names, self.inputs),
            ("output", spec.config.output_names, self.outputs),
        ):
            missing = [name for name in wanted if name not in present]
            if missing:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{spec.config.name}': config {kind}(s) {missing} are not tensors of "
                    f"the engine (its {kind}s: {present})",
                )

    def _check_shape_tensors(self, spec: LoadSpec) -> None:
        """An engine input that is a shape tensor (its values set other tensors' shapes, given
        on the host, not batched) cannot be fed as a batched device tensor: refused at load,
        naming the field (``shared.model_config.rate_limiter.check_shape_tensors`` refuses a
        configuration that declares one)."""
        for name in self.inputs:
            if self.engine.is_shape_inference_io(name):
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{spec.config.name}': engine input '{name}' is a shape tensor "
                    "(field 'input.is_shape_tensor'); Conch's TensorRT backend passes "
                    "execution tensors only (rebuild the engine without shape tensor inputs)",
                )

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        torch = self.torch
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            buffers: dict[str, Any] = {}  # kept alive until the stream finished with them
            for name in self.inputs:
                if name not in inputs:
                    raise ConchError(ErrorCode.INVALID_ARG, f"input '{name}' is required")
                np_dtype, _ = self.dtypes[name]
                host = np.ascontiguousarray(inputs[name], dtype=np_dtype)
                tensor = torch.from_numpy(host).to(self.device, non_blocking=True)
                if not self.context.set_input_shape(name, tuple(tensor.shape)):
                    raise self._shape_error(name, tensor.shape)
                self.context.set_tensor_address(name, tensor.data_ptr())
                buffers[name] = tensor
            for name in self.outputs:  # TensorRT needs an address for every output
                shape = tuple(self.context.get_tensor_shape(name))
                if any(d < 0 for d in shape):
                    raise ConchError(
                        ErrorCode.UNSUPPORTED,
                        f"output '{name}' has a data-dependent shape {shape}; not supported",
                    )
                tensor = torch.empty(shape, dtype=self.dtypes[name][1], device=self.device)
                self.context.set_tensor_address(name, tensor.data_ptr())
                buffers[name] = tensor
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise ConchError(ErrorCode.INTERNAL, "TensorRT execute_async_v3 failed")
            # .cpu() runs on this stream and waits for it, so the results are complete.
            return {name: buffers[name].cpu().numpy() for name in output_names}

    def _shape_error(self, name: str, shape: Any) -> ConchError:
        low, _, high = self.engine.get_tensor_profile_shape(name, self.profile)
        return ConchError(
            ErrorCode.INVALID_ARG,
            f"input '{name}' has shape {list(shape)}, outside the engine's optimization profile "
            f"{self.profile} (min {list(low)}, max {list(high)})",
        )

    def unload(self) -> None:
        self.stream.synchronize()
        del self.context, self.engine, self.runtime

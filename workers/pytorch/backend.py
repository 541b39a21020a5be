"""PyTorch backend: TorchScript (``model.pt``) and ``torch.export`` programs (``model.pt2``).

Tensor names follow Triton's libtorch backend: ``<name>__<index>`` (``INPUT__0``, ``OUTPUT__1``)
names the position; otherwise an input is matched to the ``forward()`` argument of the same name,
and anything else takes its position in the config. Outputs that come back as a dict are matched
by name. Execution runs under ``torch.inference_mode()`` (Triton's ``INFERENCE_MODE`` parameter,
default on), on the instance's CUDA device and its own CUDA stream when the instance is a GPU one.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shared.wire import datatypes
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance

log = logging.getLogger(__name__)

EXPORT_PLATFORM = "pytorch_torch_export"
_POSITIONAL = re.compile(r"^.+__(\d+)$")
_THREADS_LOCK = threading.Lock()
# Inputs arrive as read-only views of the request bytes; the model never writes to them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


class PyTorchBackend(Backend):
    name = "pytorch"

    def load(self, spec: LoadSpec) -> ModelInstance:
        path = model_path(spec)
        if not path.is_file():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"model '{spec.config.name}' version {spec.version}: no file '{path}' (expected "
                "a TorchScript model.pt or a torch.export model.pt2)",
            )
        return PyTorchInstance(spec)


def model_path(spec: LoadSpec) -> Path:
    """``default_model_filename`` if set; ``model.pt2`` for torch.export programs."""
    if spec.config.default_model_filename:
        return spec.version_path / spec.config.default_model_filename
    exported = spec.version_path / "model.pt2"
    if spec.config.platform == EXPORT_PLATFORM or (
        exported.is_file() and not (spec.version_path / "model.pt").is_file()
    ):
        return exported
    return spec.version_path / "model.pt"


def device_for(spec: LoadSpec) -> torch.device:
    wants_gpu = spec.device == "gpu" or spec.instance_group.kind == "KIND_GPU"
    if not wants_gpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConchError(
            ErrorCode.UNAVAILABLE,
            f"model '{spec.config.name}' asks for a GPU instance but torch sees no CUDA device "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False)",
        )
    if spec.device_id >= torch.cuda.device_count():
        raise ConchError(
            ErrorCode.UNAVAILABLE,
            f"model '{spec.config.name}' asks for GPU {spec.device_id} but torch sees "
            f"{torch.cuda.device_count()} CUDA device(s)",
        )
    return torch.device("cuda", spec.device_id)


def _flag(parameters: dict[str, str], name: str, default: bool) -> bool:
    value = parameters.get(name)
    return default if value is None else value.strip().lower() in ("true", "1", "yes", "on")


def apply_thread_parameters(parameters: dict[str, str]) -> None:
    """Triton's INTRA_OP_THREAD_COUNT / INTER_OP_THREAD_COUNT; process-wide in torch."""
    with _THREADS_LOCK:
        if "INTRA_OP_THREAD_COUNT" in parameters:
            torch.set_num_threads(int(parameters["INTRA_OP_THREAD_COUNT"]))
        if "INTER_OP_THREAD_COUNT" in parameters:
            try:
                torch.set_num_interop_threads(int(parameters["INTER_OP_THREAD_COUNT"]))
            except RuntimeError:  # only settable before the first parallel work
                log.warning("INTER_OP_THREAD_COUNT ignored: torch's inter-op pool already started")


def load_module(path: Path, device: torch.device, exported: bool) -> tuple[Any, list[str]]:
    """The callable module and its forward() argument names (for name matching)."""
    if exported:
        program = torch.export.load(str(path))
        if device.type != "cpu":
            from torch.export.passes import move_to_device_pass

            program = move_to_device_pass(program, device)
        module = program.module()
        names = [p.name for p in inspect.signature(module.forward).parameters.values()]
        return module, names
    with warnings.catch_warnings():  # torch >= 2.10 marks TorchScript deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        module = torch.jit.load(str(path), map_location=device)
    module.eval()
    names = [a.name for a in module.forward.schema.arguments if a.name != "self"]
    return module, names


def input_order(config_names: list[str], forward_names: list[str]) -> list[str]:
    """Config input names in the order forward() takes them (Triton's naming rules)."""
    slots: dict[int, str] = {}
    for index, name in enumerate(config_names):
        match = _POSITIONAL.match(name)
        if match:
            position = int(match.group(1))
        elif name in forward_names:
            position = forward_names.index(name)
        else:
            position = index
        if position in slots:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"inputs '{slots[position]}' and '{name}' both map to forward() argument "
                f"{position}; name inputs INPUT__<i> or as forward()'s arguments {forward_names}",
            )
        slots[position] = name
    return [slots[p] for p in sorted(slots)]


def output_positions(config_names: list[str]) -> dict[str, int]:
    """Where each config output sits in a tuple result: ``__<i>`` suffix, else config order."""
    positions: dict[str, int] = {}
    for index, name in enumerate(config_names):
        match = _POSITIONAL.match(name)
        positions[name] = int(match.group(1)) if match else index
    return positions


class PyTorchInstance(TensorModelInstance):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec.config)
        parameters = spec.config.parameters
        apply_thread_parameters(parameters)
        self.device = device_for(spec)
        self.inference_mode = _flag(parameters, "INFERENCE_MODE", True)
        self.optimized_execution = not _flag(parameters, "DISABLE_OPTIMIZED_EXECUTION", False)
        self.empty_cache = _flag(parameters, "ENABLE_CACHE_CLEANING", False)
        path = model_path(spec)
        self.exported = path.suffix == ".pt2"
        try:
            self.module, forward_names = load_module(path, self.device, self.exported)
        except ConchError:
            raise
        except Exception as exc:
            raise ConchError(
                ErrorCode.INTERNAL, f"model '{spec.config.name}': cannot load '{path}': {exc}"
            ) from exc
        self.input_order = input_order(spec.config.input_names, forward_names)
        self.output_positions = output_positions(spec.config.output_names)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        log.info(
            "pytorch model ready",
            extra={"model": spec.config.name, "version": spec.version, "device": str(self.device)},
        )

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        grad_off = torch.inference_mode() if self.inference_mode else torch.no_grad()
        with grad_off, self._jit_options():
            if self.stream is None:
                result = self.module(*self._arguments(inputs))
                return self._outputs(result, output_names)
            with torch.cuda.stream(self.stream):
                result = self.module(*self._arguments(inputs))
                outputs = self._outputs(result, output_names)  # .cpu() synchronises the stream
            if self.empty_cache:
                torch.cuda.empty_cache()
            return outputs

    def _jit_options(self) -> contextlib.AbstractContextManager[Any]:
        """DISABLE_OPTIMIZED_EXECUTION (TorchScript only; the JIT flag is process-wide)."""
        if self.optimized_execution or self.exported:
            return contextlib.nullcontext()
        return torch.jit.optimized_execution(False)  # type: ignore[attr-defined]  # not in __all__

    def _arguments(self, inputs: dict[str, np.ndarray]) -> list[Any]:
        arguments: list[Any] = []
        for name in self.input_order:
            array = inputs.get(name)
            if array is None:
                arguments.append(None)  # an optional input the request left out
                continue
            if array.dtype == object:
                raise ConchError(
                    ErrorCode.UNSUPPORTED,
                    f"input '{name}' is BYTES; the pytorch backend takes numeric tensors only",
                )
            tensor = torch.from_numpy(np.ascontiguousarray(array))
            arguments.append(tensor.to(self.device, non_blocking=True))
        return arguments

    def _outputs(self, result: Any, output_names: list[str]) -> dict[str, np.ndarray]:
        if isinstance(result, torch.Tensor):
            result = (result,)
        outputs: dict[str, np.ndarray] = {}
        for name in output_names:
            if isinstance(result, dict):
                value = result.get(name)
            else:
                position = self.output_positions.get(name, -1)
                value = result[position] if 0 <= position < len(result) else None
            if not isinstance(value, torch.Tensor):
                raise ConchError(
                    ErrorCode.INTERNAL,
                    f"model '{self.config.name}' returned no tensor for output '{name}' "
                    f"(forward() returned {_describe(result)})",
                )
            outputs[name] = self._to_numpy(name, value)
        return outputs

    def _to_numpy(self, name: str, value: torch.Tensor) -> np.ndarray:
        array = value.detach().cpu().numpy()
        spec = self.config.output(name)
        expected = datatypes.BY_NAME[spec.datatype].dtype if spec else None
        return array.astype(expected) if expected is not None and array.dtype != expected else array

    def unload(self) -> None:
        del self.module
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _describe(result: Any) -> str:
    if isinstance(result, dict):
        return f"a dict with keys {sorted(result)}"
    return f"{type(result).__name__} of {len(result)}"

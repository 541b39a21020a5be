"""OpenVINO on CPU (``backend: "openvino"``): IR (``model.xml`` + ``model.bin``) and the other
formats OpenVINO reads (``default_model_filename: "model.onnx"``), as Triton's openvino_backend
serves them.

Each instance reads and compiles the model once, on its own ``ov.Core`` and with one infer
request, so instances never share state and the batch loop's thread is the only caller of
``run``. The batch dimension is compiled dynamic (1..max_batch_size) so every batch the dynamic
batcher forms runs as one call; Triton's SKIP_OV_DYNAMIC_BATCHSIZE fixes it at max_batch_size
instead, for models whose graph cannot change batch size (``parameters.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from shared.model_config import ModelConfig
from shared.wire.datatypes import BY_NAME
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance
from workers.loading.auto_complete import complete_tensors
from workers.openvino import parameters, ports

log = logging.getLogger(__name__)

DEVICE = "CPU"


class OpenVinoBackend(Backend):
    name = "openvino"

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """Inputs and outputs the configuration leaves out, read from the model's ports (Triton's
        openvino backend does the same); the batch dimension is left out of ``dims`` when
        ``max_batch_size`` > 0."""
        if (config.inputs and config.outputs) or not model_file.exists():
            return None
        model = _read(ov.Core(), config.name, model_file)
        return complete_tensors(config, model.inputs, model.outputs, _tensor_config)

    def load(self, spec: LoadSpec) -> ModelInstance:
        config = spec.config
        if spec.instance_group.kind == "KIND_GPU":
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"unable to load model '{config.name}', the OpenVINO backend supports only "
                "Kind CPU and AUTO (instance_group kind: KIND_GPU)",
            )
        if not spec.model_file.exists():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"unable to find '{spec.model_file}' for model '{config.name}' version "
                f"{spec.version} (expected an OpenVINO IR model.xml with its model.bin, or the "
                "file named by default_model_filename)",
            )
        return OpenVinoInstance(spec, parameters.parse(config.name, config.parameters))


def _read(core: Any, model: str, path: Path) -> Any:
    try:
        return core.read_model(str(path))
    except RuntimeError as exc:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{model}': OpenVINO cannot read '{path}': {ports.reason(exc)}",
        ) from exc


def _tensor_config(port: Any, batched: bool, model: str) -> dict[str, Any]:
    name = port.get_any_name() if port.get_names() else port.get_node().get_friendly_name()
    data_type = ports.OV_TO_CONFIG.get(port.get_element_type().get_type_name())
    shape = port.get_partial_shape()
    problem = ""
    if data_type is None:
        problem = f"of OpenVINO element type {port.get_element_type().get_type_name()}"
    elif shape.rank.is_dynamic:
        problem = "of dynamic rank"
    elif batched and len(shape) == 0:
        problem = "a scalar (no batch dimension although max_batch_size > 0)"
    if problem:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{model}': cannot auto-complete '{name}' {problem}; list it in config.pbtxt",
        )
    dims = [d.get_length() if d.is_static else -1 for d in shape]
    return {"name": name, "data_type": data_type, "dims": dims[1:] if batched else dims}


class OpenVinoInstance(TensorModelInstance):
    def __init__(self, spec: LoadSpec, options: parameters.OpenVinoOptions):
        super().__init__(spec.config)
        config = spec.config
        self.options = options
        self.batched = config.max_batch_size > 0
        if options.ignored:
            log.warning(
                "openvino backend ignores unknown parameters",
                extra={"model": config.name, "parameters": list(options.ignored)},
            )
        core = ov.Core()
        if options.cpu_extension_path:
            core.add_extension(options.cpu_extension_path)
        model = _read(core, config.name, spec.model_file)
        model, input_ports, output_ports = ports.prepare(config, model, options)
        properties = _supported(core, config.name, options.properties)
        try:
            self.compiled = core.compile_model(model, DEVICE, properties)
        except RuntimeError as exc:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{config.name}': OpenVINO cannot compile it for {DEVICE} with "
                f"{properties}: {ports.reason(exc)}",
            ) from exc
        self.request = self.compiled.create_infer_request()
        # config name -> (port index, numpy dtype, model-side dims from `reshape` or None)
        self._inputs = {
            s.name: (i, _dtype(s.datatype), s.reshape)
            for s, i in zip(config.inputs, input_ports, strict=True)
        }
        # config name -> (port index, the configured dims when `reshape` changes them, or None)
        self._outputs = {
            s.name: (i, s.dims if s.reshape is not None else None)
            for s, i in zip(config.outputs, output_ports, strict=True)
        }
        log.info(
            "openvino model compiled",
            extra={"model": config.name, "version": spec.version, "properties": properties},
        )

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        rows = next(iter(inputs.values())).shape[0] if self.batched and inputs else 0
        pad = self._padding(rows)
        feed: dict[int, np.ndarray] = {}
        for name, array in inputs.items():
            entry = self._inputs.get(name)
            if entry is None:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{self.config.name}' has no input '{name}'; expected one of "
                    f"{sorted(self._inputs)}",
                )
            index, dtype, reshape = entry
            if array.dtype == object:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"model '{self.config.name}' input '{name}': the OpenVINO backend does not "
                    "take BYTES tensors",
                )
            value = np.ascontiguousarray(array, dtype=dtype)
            if reshape is not None:
                value = value.reshape(([rows] if self.batched else []) + list(reshape))
            if pad:
                value = np.concatenate([value, np.zeros((pad, *value.shape[1:]), dtype)])
            feed[index] = value
        # The inputs are read in place (no copy); the outputs are copied out of the request,
        # which the next batch reuses.
        results = self.request.infer(feed, share_inputs=True)
        outputs: dict[str, np.ndarray] = {}
        for name in output_names:
            index, dims = self._outputs[name]
            value = np.asarray(results[index])
            if pad:
                value = value[:rows]
            if dims is not None:
                value = value.reshape(([value.shape[0]] if self.batched else []) + list(dims))
            outputs[name] = value
        return outputs

    def _padding(self, rows: int) -> int:
        """Rows to add to a batch for a model compiled at a fixed batch size, or an error."""
        size = self.config.max_batch_size
        if not (self.batched and self.options.skip_dynamic_batch) or rows == size:
            return 0
        if not self.options.batch_padding:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{self.config.name}': expected requests with batch size '{size}', got "
                f"'{rows}'... this error can be avoided by setting 'ENABLE_BATCH_PADDING' "
                "parameter in model configuration to 'YES' at a performance cost.",
            )
        return size - rows

    def unload(self) -> None:
        del self.request
        del self.compiled


def _dtype(datatype: str) -> np.dtype[Any]:
    found = BY_NAME[datatype].dtype
    assert found is not None  # BYTES was refused by ports.prepare
    return found


def _supported(core: Any, model: str, properties: dict[str, str]) -> dict[str, str]:
    """The properties the CPU plugin knows; the others are logged and left out (e.g.
    COMPILATION_NUM_THREADS, which some CPU plugin releases do not take)."""
    known = core.get_property(DEVICE, "SUPPORTED_PROPERTIES")
    dropped = sorted(key for key in properties if key not in known)
    if dropped:
        log.warning(
            "the OpenVINO CPU plugin does not take these properties; left out",
            extra={"model": model, "properties": dropped},
        )
    return {key: value for key, value in properties.items() if key in known}

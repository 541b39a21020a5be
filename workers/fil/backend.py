"""Triton's FIL backend (``backend: "fil"``): XGBoost, LightGBM and Treelite tree models on CPU.

The model is one tensor call per batch, as in Triton's FIL: the batch's rows of ``input__0``
(FP32, one column per feature) are concatenated (``TensorModelInstance``), predicted once by the
model's own library and split back per request. ``output__0`` is shaped the way FIL shapes it
(``workers.fil.parameters.shape_output``): class ids, probabilities or regression values.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import numpy as np

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance
from workers.fil import forests
from workers.fil.parameters import (
    FilParameters,
    model_filename,
    output_width,
    parse,
    shape_output,
    threads,
)

log = logging.getLogger(__name__)

INPUT = "input__0"
OUTPUT = "output__0"


def model_path(config: ModelConfig, version_path: Path, parameters: FilParameters) -> Path:
    """The model file: default_model_filename, else FIL's name for the model_type."""
    return version_path / model_filename(config.default_model_filename, parameters)


class FilBackend(Backend):
    name = "fil"

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """``input__0`` and ``output__0`` from the model when the configuration leaves them
        out: the model's feature count and the output's columns for the parameters given."""
        if config.inputs and config.outputs:
            return None
        parameters = parse(config.name, config.parameters)
        version_path = model_file if model_file.is_dir() else model_file.parent
        path = model_path(config, version_path, parameters)
        if not path.is_file():
            return None  # the load names the missing file
        forest = forests.load(config.name, path, parameters.model_type, 1)
        batched = config.max_batch_size > 0
        rows = [] if batched else [-1]
        width = output_width(parameters, forest.num_classes)
        completed = copy.deepcopy(config.json)
        if not config.inputs:
            completed["input"] = [
                {"name": INPUT, "data_type": "TYPE_FP32", "dims": [*rows, forest.num_features]}
            ]
        if not config.outputs:
            completed["output"] = [
                {"name": OUTPUT, "data_type": "TYPE_FP32", "dims": [*rows, width]}
            ]
        return completed

    def load(self, spec: LoadSpec) -> ModelInstance:
        config = spec.config
        if spec.instance_group.kind == "KIND_GPU":
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"model '{config.name}': backend fil serves tree models on CPU here; use "
                "instance_group kind KIND_CPU or KIND_AUTO instead of KIND_GPU",
            )
        parameters = parse(config.name, config.parameters)
        path = model_path(config, spec.version_path, parameters)
        forest = forests.load(config.name, path, parameters.model_type, threads(parameters))
        width = check_config(config, parameters, forest.num_features, forest.num_classes)
        for note in parameters.notes:
            log.info("fil: %s", note, extra={"model": config.name})
        log.info(
            "fil model ready",
            extra={
                "model": config.name,
                "version": spec.version,
                "model_type": parameters.model_type,
                "features": forest.num_features,
                "classes": forest.num_classes,
            },
        )
        return FilInstance(config, parameters, forest, width)


def _tensor(config: ModelConfig, name: str, kind: str) -> tuple[str, list[int]]:
    specs = config.inputs if kind == "input" else config.outputs
    if len(specs) != 1 or specs[0].name != name:
        listed = [spec.name for spec in specs]
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{config.name}': a FIL model has one {kind} named '{name}'; the "
            f"configuration lists {listed}",
        )
    return specs[0].datatype, list(specs[0].dims)


def check_config(
    config: ModelConfig, parameters: FilParameters, num_features: int, num_classes: int
) -> int:
    """The configured tensors against the model: FP32 ``input__0`` with one column per feature,
    FP32 ``output__0`` with the columns FIL returns. The output's column count is returned
    (a binary classifier's predict_proba may have 1 or 2)."""
    name = config.name
    expected = output_width(parameters, num_classes)
    allowed = {expected, 1} if expected == 2 and num_classes == 1 else {expected}
    for tensor, kind, columns in ((INPUT, "input", {num_features}), (OUTPUT, "output", allowed)):
        datatype, dims = _tensor(config, tensor, kind)
        if datatype != "FP32":
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{name}': FIL's {kind} '{tensor}' is {datatype}; expected TYPE_FP32",
            )
        last = dims[-1] if dims else 1
        if last != -1 and last not in columns:
            want = " or ".join(str(c) for c in sorted(columns))
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{name}': {kind} '{tensor}' has dims {dims}; the model "
                f"({parameters.model_type}) needs {want} in its last dimension",
            )
        if kind == "output":
            return expected if last == -1 else last
    return expected  # pragma: no cover - the loop returns on the output


class FilInstance(TensorModelInstance):
    def __init__(
        self, config: ModelConfig, parameters: FilParameters, forest: forests.Forest, width: int
    ):
        super().__init__(config)
        self.parameters = parameters
        self.forest = forest
        self.width = width

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        value = inputs.get(INPUT)
        if value is None:
            raise ConchError(
                ErrorCode.INVALID_ARG, f"model '{self.config.name}': input '{INPUT}' is missing"
            )
        rows = value.reshape(1, -1) if value.ndim == 1 else value
        features = self.forest.num_features
        if rows.ndim != 2 or rows.shape[1] != features or rows.dtype != np.float32:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{self.config.name}': input '{INPUT}' has shape {list(value.shape)} "
                f"of {value.dtype}; expected FP32 rows of {features} features",
            )
        scores = self.forest.predict(np.ascontiguousarray(rows))
        output = shape_output(self.parameters, scores, self.width)
        return {OUTPUT: output.reshape(-1) if value.ndim == 1 else output}

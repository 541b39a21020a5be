"""Triton's auto-complete at load time: inputs, outputs and batching read off the model itself.

A configuration without inputs or outputs (a ``config.pbtxt`` that leaves them out, none at all,
or a load override such as ``{"max_batch_size": 16}``) is completed by the backend that will
load it (``Backend.auto_complete``: ONNX Runtime reads the graph, the Python backend runs the
model's ``auto_complete_config``), as Triton does unless it runs with
``--strict-model-config=true``; then such a configuration fails to load, naming what is missing.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shared import model_config
from shared.storage.repository import RepositoryModel
from shared.wire.errors import invalid
from workers.backend import Backend

Tensor = TypeVar("Tensor")


def complete_tensors(
    config: model_config.ModelConfig,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    describe: Callable[[Tensor, bool, str], dict[str, Any]],
) -> dict[str, Any]:
    """The configuration's JSON form with the inputs or outputs it leaves out described from
    the model's own tensors (``describe(tensor, batched, model)``: one config entry, the batch
    dimension left out of ``dims`` when ``max_batch_size`` > 0). Backends that read a graph's
    tensors (ONNX Runtime, OpenVINO) complete this way, as Triton's do."""
    batched = config.max_batch_size > 0
    completed = copy.deepcopy(config.json)
    for key, listed, found in (
        ("input", config.inputs, inputs),
        ("output", config.outputs, outputs),
    ):
        if not listed:
            completed[key] = [describe(tensor, batched, config.name) for tensor in found]
    return completed


def complete(backend: Backend, model: RepositoryModel, strict: bool) -> RepositoryModel:
    """The model with its configuration completed (or checked complete, when strict)."""
    config = model.config
    if strict:
        pairs = (("input", config.inputs), ("output", config.outputs))
        missing = [kind for kind, specs in pairs if not specs]
        if missing and config.platform != "ensemble":
            raise invalid(
                f"model '{config.name}': the configuration lists no {' and no '.join(missing)}s "
                "and auto-complete is off (--strict-model-config=true); list them in "
                "config.pbtxt"
            )
        return model
    versions = model.versions or model.available_versions
    if not versions:
        return model
    model_file = model.version_path(versions[-1]) / config.model_filename
    completed = backend.auto_complete(config, model_file)
    if completed is None:
        return model
    config = model_config.from_json(
        completed, source=f"auto-completed configuration of '{config.name}'", model_dir=model.path
    )
    return dataclasses.replace(model, config=config)

"""Triton's auto-complete at load time: inputs, outputs and batching read off the model itself.

A configuration without inputs or outputs (a ``config.pbtxt`` that leaves them out, none at all,
or a load override such as ``{"max_batch_size": 16}``) is completed by the backend that will
load it (``Backend.auto_complete``: ONNX Runtime reads the graph, the Python backend runs the
model's ``auto_complete_config``), as Triton does unless it runs with
``--strict-model-config=true``; then such a configuration fails to load, naming what is missing.
"""

from __future__ import annotations

import dataclasses

from shared import model_config
from shared.storage.repository import RepositoryModel
from shared.wire.errors import invalid
from workers.backend import Backend


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

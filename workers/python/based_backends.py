"""Which models the python worker serves, and which ``model.py`` serves each.

Besides ``backend: "python"`` (the model's own ``<version>/model.py``), the python worker serves
every model whose backend is not one of Conch's built-in backends: a Python-based backend,
``<backend directory>/<name>/model.py`` (``shared.model_config.python_based``). It takes those
whose backend is found nowhere too, so that their load fails on this worker with Triton's message
and the places it looked, instead of nobody answering for them.
"""

from __future__ import annotations

from pathlib import Path

from shared.model_config import ModelConfig, python_based
from workers.backend_table import BACKENDS
from workers.settings import WorkerSettings


class BackendDirectories:
    """The worker's ``backend_directory`` setting, resolved once."""

    def __init__(self, setting: str | None = None):
        if setting is None:  # the backend table builds backends without arguments
            setting = WorkerSettings.from_env().backend_directory
        self.directories = python_based.parse_directories(setting)

    def accepts(self, config: ModelConfig) -> bool:
        return config.backend == "python" or python_based.is_candidate(config, BACKENDS)

    def is_python_based(self, config: ModelConfig) -> bool:
        return config.backend != "python" and python_based.is_candidate(config, BACKENDS)

    def model_file(self, config: ModelConfig, version_path: Path) -> Path:
        """The ``model.py`` that runs the model (ConchError naming where it looked if none)."""
        if not self.is_python_based(config):
            return version_path / config.model_filename
        return python_based.resolve(config, self.directories, BACKENDS)

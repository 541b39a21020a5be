"""A Triton model repository on disk: ``<repo>/<model>/config.pbtxt`` and numeric versions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared import model_config
from shared.model_config import ModelConfig
from shared.storage.model_paths import check_model_files
from shared.wire.errors import ConchError, invalid


@dataclass(frozen=True)
class RepositoryModel:
    name: str
    path: Path
    config: ModelConfig
    # Every numeric version directory present on disk.
    available_versions: list[int]

    @property
    def versions(self) -> list[int]:
        """The versions the version_policy selects for loading."""
        return self.config.version_policy.select(self.available_versions)

    def version_path(self, version: int) -> Path:
        return self.path / str(version)


@dataclass(frozen=True)
class ScanResult:
    models: dict[str, RepositoryModel]
    # Model directory name -> why it could not be read (the rest still load, as in Triton).
    errors: dict[str, str]


def scan(repository: str | Path, auto_complete: bool = True) -> ScanResult:
    """Every model directory of the repository; ``auto_complete`` (Triton's default) lets a
    model without config.pbtxt, or one naming no platform, be read off its model files."""
    root = Path(repository)
    if not root.is_dir():
        raise invalid(f"model repository '{root}' is not a directory")
    models: dict[str, RepositoryModel] = {}
    errors: dict[str, str] = {}
    for entry in sorted(root.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        try:
            models[entry.name] = read_model(entry, auto_complete=auto_complete)
        except ConchError as exc:
            errors[entry.name] = exc.message
    return ScanResult(models=models, errors=errors)


def read_model(
    model_dir: Path,
    config: ModelConfig | None = None,
    auto_complete: bool = True,
    config_name: str = "",
) -> RepositoryModel:
    """The model in ``model_dir``, with its configuration (or ``config``, an override); every
    file the configuration names must stay inside that directory."""
    config = config or model_config.load(model_dir, auto_complete, config_name)
    check_model_files(config)
    versions = sorted(
        {
            int(child.name)
            for child in model_dir.iterdir()
            if child.is_dir()
            and child.name.isascii()
            and child.name.isdigit()
            and int(child.name) > 0
        }
    )
    return RepositoryModel(
        name=config.name, path=model_dir, config=config, available_versions=versions
    )

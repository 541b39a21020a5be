"""Python-based backends: ``backend: "NAME"`` served by ``<backend directory>/NAME/model.py``.

Triton serves a model whose backend is no shared library of its own with the Python backend and
the ``model.py`` of the backend's directory (``--backend-directory``, default
``/opt/tritonserver/backends``); the model's version directory holds only its data (vLLM's
``1/model.json``). Conch does the same in its python worker. The rules, pure and shared by the
worker (which loads the model) and ``conch up`` (which plans which worker serves it):

- a name of one of Conch's built-in backends (onnxruntime, pytorch, python, ...) is never a
  Python-based backend, as Triton's C++ backends win over ``model.py``;
- the backend directories are searched in order and the first ``NAME/model.py`` found wins;
- the setting lists them separated by ``:`` (as ``PATH`` does) or ``,`` (as Conch's other list
  settings do); unset, Triton's ``/opt/tritonserver/backends`` is searched, then the example
  backends of a Conch source checkout (``examples/backends``), so the project's own example
  repository starts without the flag;
- ``runtime: "model.py"`` in the configuration says the same explicitly (Triton's field).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from shared.model_config.structs import ModelConfig
from shared.wire.errors import ConchError, ErrorCode

TRITON_BACKEND_DIRECTORY = Path("/opt/tritonserver/backends")
# A source checkout's example backends (absent from an installed wheel: then not searched).
EXAMPLE_BACKENDS = Path(__file__).resolve().parents[2] / "examples" / "backends"
MODEL_FILE = "model.py"
NOT_BACKENDS = frozenset({"", "ensemble"})
_SEPARATORS = re.compile(r"[:,]")


def default_directories() -> list[Path]:
    """Where Python-based backends are looked for when no directory is set."""
    found = [TRITON_BACKEND_DIRECTORY]
    if EXAMPLE_BACKENDS.is_dir():
        found.append(EXAMPLE_BACKENDS)
    return found


def parse_directories(setting: str) -> list[Path]:
    """The directories a setting names (``:`` or ``,`` between them); empty: the defaults."""
    parts = [part.strip() for part in _SEPARATORS.split(setting or "")]
    named = [Path(part).expanduser() for part in parts if part]
    return named or default_directories()


def is_candidate(config: ModelConfig, built_in: Collection[str]) -> bool:
    """Whether the model's backend would be a Python-based one: named, not a built-in backend
    and not an ensemble (found or not: a missing one fails its load with the places looked in)."""
    if config.platform == "ensemble" or config.backend in NOT_BACKENDS:
        return False
    return config.backend not in built_in


def find(name: str, directories: list[Path]) -> Path | None:
    """``<directory>/<name>/model.py`` of the first directory that has one."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        return None  # a backend name is one directory name, never a path out of the directory
    for directory in directories:
        candidate = directory / name / MODEL_FILE
        if candidate.is_file():
            return candidate
    return None


def not_found(config: ModelConfig, directories: list[Path], built_in: Collection[str]) -> str:
    """Triton's message for a backend found nowhere, with where Conch looked."""
    looked = ", ".join(f"'{d / config.backend / MODEL_FILE}'" for d in directories)
    return (
        f"unable to find backend library for backend '{config.backend}' of model "
        f"'{config.name}': no Python-based backend of that name (searched: {looked}) and it is "
        f"not a built-in backend (expected one of {', '.join(sorted(built_in))}, or a "
        f"directory <backend-directory>/{config.backend}/{MODEL_FILE}; set the directories with "
        "--backend-directory or CONCH_WORKER_BACKEND_DIRECTORY)"
    )


def resolve(config: ModelConfig, directories: list[Path], built_in: Collection[str]) -> Path:
    """The backend's ``model.py`` that serves the model; ConchError when there is none."""
    runtime = str(config.json.get("runtime") or "")
    if runtime and runtime != MODEL_FILE:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{config.name}': field 'runtime' is '{runtime}'; Conch runs no backend "
            f"shared libraries, expected '{MODEL_FILE}' (a Python-based backend) or no runtime",
        )
    found = find(config.backend, directories)
    if found is None:
        raise ConchError(ErrorCode.INVALID_ARG, not_found(config, directories, built_in))
    return found

"""A Python model's own packed environment: Triton's ``EXECUTION_ENV_PATH`` parameter.

``parameters { key: "EXECUTION_ENV_PATH" value: { string_value:
"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }`` names a ``.tar.gz`` of a conda-pack'ed conda
environment or of a venv. Triton starts the model's stub with that environment's interpreter.
Conch's model process is a spawned child of the worker that runs Conch's own code (the pipe,
pb_utils, BLS over Redis), which needs the worker's packages (NumPy, msgspec, redis), and a
user's environment does not hold them. So the worker extracts the archive once (a cache keyed by
the archive's path, size and modification time) and the model process puts the environment's
``site-packages`` first on ``sys.path``: the model imports the environment's packages, with the
worker's interpreter. Compiled packages are built for one Python version, so an environment of
another Python ``major.minor`` than the worker's is refused at load, naming both versions.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
_lock = threading.Lock()
_VERSION_DIR = re.compile(r"^python(\d+)\.(\d+)$")


def site_packages(config: ModelConfig, model_path: Path, cache_dir: Path | None = None) -> str:
    """The extracted environment's site-packages directory; "" when the model names none.
    Raises ConchError (the load fails) naming the parameter and what was wrong."""
    value = config.parameters.get(PARAMETER, "").strip()
    if not value:
        return ""
    archive = Path(value.replace(MODEL_DIRECTORY, str(model_path)))
    where = f"model '{config.name}': parameters.{PARAMETER} is '{value}'"
    if not archive.is_file():
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"{where}: no file '{archive}' (expected a .tar.gz of a conda-pack or venv "
            "environment; $$TRITON_MODEL_DIRECTORY is the model's directory)",
        )
    stat = archive.stat()
    digest = hashlib.sha256(f"{archive.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    root = cache_dir or Path(tempfile.gettempdir()) / "conch-python-envs"
    target = root / digest.hexdigest()[:24]
    with _lock:
        if not (target / ".conch-complete").exists():
            _extract(archive, target, where)
    return str(_check_version(target, where))


def _extract(archive: Path, target: Path, where: str) -> None:
    """Into a private directory first, then renamed into place (two workers may race)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(staging, filter=_member)
        (staging / ".conch-complete").touch()
        try:
            os.rename(staging, target)
        except OSError:  # another worker put it there first
            if not (target / ".conch-complete").exists():
                raise
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConchError(
            ErrorCode.INVALID_ARG, f"{where}: cannot extract '{archive}': {exc}"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """Tar's "data" filter (nothing outside the directory, no devices); links that point outside
    (a venv's ``bin/python`` -> the system interpreter) are left out: only packages are used."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        if member.issym() or member.islnk():
            return None
        raise


def _check_version(root: Path, where: str) -> Path:
    """The one ``lib/pythonX.Y/site-packages`` of the environment, of this interpreter's X.Y."""
    found = sorted(p for p in root.glob("lib/python*/site-packages") if p.is_dir())
    if not found:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"{where}: the archive holds no lib/python<version>/site-packages (expected a "
            "conda-pack or venv environment packed from its root)",
        )
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    versions = {}
    for path in found:
        match = _VERSION_DIR.match(path.parent.name)
        if match:
            versions[f"{match.group(1)}.{match.group(2)}"] = path
    if ours in versions:
        return versions[ours]
    theirs = ", ".join(sorted(versions)) or "an unknown version"
    raise ConchError(
        ErrorCode.INVALID_ARG,
        f"{where}: the environment is for Python {theirs} but the worker runs Python {ours}; "
        "Conch runs the model with the worker's interpreter and the environment's packages, "
        f"so the environment must be built with Python {ours}",
    )

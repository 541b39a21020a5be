"""Model files sent with a load (Triton's ``file:<path>`` load parameters): their paths checked
and their bytes written into the model directory, confined to it.

The gateway checks the paths before anything is stored (``gateway.repository.files``); each
worker checks again, following symbolic links, before it writes
(``workers.loading.control_actions``).
"""

from __future__ import annotations

import os
import posixpath
import uuid
from pathlib import Path

from shared.wire.errors import invalid

PREFIX = "file:"
NAME_MAX = 255  # bytes in one path component (Linux NAME_MAX)
PATH_MAX = 4096


def normalized(model: str, parameter: str) -> str:
    """The relative path a ``file:<path>`` parameter names, normalized; refused when it would
    leave the model directory or no file system could hold it (Triton's texts)."""
    relative = parameter[len(PREFIX) :]
    if not relative or "\0" in relative:
        raise invalid(f"Invalid file parameter '{parameter}': expected 'file:<version>/<name>'")
    if any(len(part.encode()) > NAME_MAX for part in relative.split("/")) or (
        len(relative.encode()) > PATH_MAX
    ):
        raise invalid(
            f"failed to load '{model}', failed to poll from model repository: file parameter "
            f"'{parameter[:64]}...' names a path component longer than {NAME_MAX} bytes"
        )
    path = posixpath.normpath(relative)
    if relative.startswith("/") or path == ".." or path.startswith("../") or path == ".":
        raise invalid(
            f"Invalid file parameter '{parameter}' with normalized path '{path}' must stay "
            "within model directory."
        )
    return path


def write(model: str, model_dir: Path, files: dict[str, bytes]) -> list[Path]:
    """Write each file (relative path -> bytes) under ``model_dir``, creating directories;
    nothing is written when any path would land outside it."""
    root = model_dir.resolve()
    targets: list[tuple[Path, bytes]] = []
    for relative, data in files.items():
        path = normalized(model, PREFIX + relative)
        target = (root / path).resolve()
        if not target.is_relative_to(root) or target == root:
            raise invalid(
                f"Invalid file parameter '{PREFIX}{relative}' with normalized path '{target}' "
                "must stay within model directory."
            )
        if target.parent.exists() and not target.parent.is_dir():
            raise invalid(
                f"Invalid file parameter '{PREFIX}{relative}', directory has been created as a file"
            )
        targets.append((target, data))
    written: list[Path] = []
    for target, data in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".conch-upload-{uuid.uuid4().hex[:12]}")
        temporary.write_bytes(data)
        os.replace(temporary, target)
        written.append(target)
    return written

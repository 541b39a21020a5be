"""What the scripts that write one framework's example models share: they write them only where
the framework is installed, and otherwise say what they skipped and succeed, so `make models`
works with any set of extras."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path


def write_if_installed(
    repository: Path,
    module: str,
    extra: str,
    names: list[str],
    write_repository: Callable[[Path], list[Path]],
) -> int:
    """Write the models with ``write_repository`` if ``module`` imports; the exit code (0)."""
    if importlib.util.find_spec(module) is None:
        print(
            f"skipped {', '.join(names)}: {module} is not installed (pip install 'conch[{extra}]')"
        )
        return 0
    for model_dir in write_repository(repository):
        print(f"wrote {model_dir}")
    return 0

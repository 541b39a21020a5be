"""The chaos suite's mesh, started once per module from a repository the project generates."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conch import envoy_edge
from tests.chaos.chaos_mesh import ROOT, ChaosMesh


@pytest.fixture(scope="session")
def recorder_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("chaos_repo")
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_backend_models.py"), str(repo),
         "--model", "chaos_recorder"],
        check=True, capture_output=True,
    )  # fmt: skip
    return repo


@pytest.fixture(scope="module")
def chaos_mesh(
    recorder_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChaosMesh]:
    try:
        envoy = envoy_edge.envoy_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    mesh = ChaosMesh(tmp_path_factory.mktemp("chaos"), recorder_repository, envoy)
    try:
        mesh.start()
        yield mesh
    finally:
        mesh.stop()

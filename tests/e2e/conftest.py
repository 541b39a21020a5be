"""A whole mesh (scheduler, ONNX Runtime worker, two gateway processes) per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database


@pytest.fixture(scope="module")
def mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    with Mesh(redis_server.url, model_repository, log_dir=tmp_path_factory.mktemp("logs")) as mesh:
        yield mesh.start_all().wait_ready(["simple", "mlp"])

"""One mesh for the fuzzing suite: gateway (HTTP and gRPC, admin token set), scheduler, an ONNX
Runtime and a Python worker, serving an INT32 model, a BYTES model and an INT64 one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "fuzz-admin-token"
MODELS = ["simple", "tokenizer", "chaos_recorder", "versioned"]


@pytest.fixture(scope="session")
def fuzz_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("fuzz_repo")
    examples = ROOT / "examples"
    for argv in (
        [str(examples / "make_models.py"), str(repo), "--model", "simple"],
        [str(examples / "make_backend_models.py"), str(repo), "--model", "tokenizer",
         "--model", "chaos_recorder"],
    ):  # fmt: skip
        subprocess.run([sys.executable, *argv], check=True, capture_output=True)
    _versioned(repo)
    return repo


def _versioned(repo: Path) -> None:
    """``versioned``: ``simple_ab`` (OUTPUT0 = v * INPUT0) with versions 1 and 2 on disk and a
    policy that serves only 2, for the version states the fuzzers draw."""
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_models.py"), str(repo), "--model",
         "simple_ab"],
        check=True, capture_output=True,
    )  # fmt: skip
    (repo / "simple_ab").rename(repo / "versioned")
    config = repo / "versioned" / "config.pbtxt"
    text = config.read_text().replace('"simple_ab"', '"versioned"')
    policy = "version_policy {\n  all {}\n}"
    assert policy in text, text
    config.write_text(text.replace(policy, "version_policy { specific { versions: [ 2 ] } }"))


@pytest.fixture(scope="module")
def fuzz_mesh(
    redis_server: PrivateRedis, fuzz_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, fuzz_repository, log_dir=tmp_path_factory.mktemp("fuzz_logs"))
    mesh.grpc_port = free_port()  # type: ignore[attr-defined]
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-onnx", backend="onnxruntime")
        mesh.start_worker("worker-python", backend="python")
        mesh.start_gateway(
            processes=1,
            CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            CONCH_GATEWAY_GRPC_PORT=str(mesh.grpc_port),  # type: ignore[attr-defined]
        )
        mesh.wait_ready(MODELS, timeout_s=90)
        yield mesh
    finally:
        mesh.stop()

"""Issue 28's "done when", literally: a stream of 45 s, responses 11 s apart, arrives whole through
gRPC ``ModelStreamInfer`` and SSE (``generate_stream``) with default settings (nothing lowered:
the unary bound is 30 s, the stream silence bound 60 s). Both streams run at once (about 50 s
with the mesh's start).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.e2e.test_stream_deadlines import MODELS, grpc_stream, make_repository, sse_events
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e

SPACING_MS, COUNT, WAIT_MS = 11_000, 4, 1_000  # responses at 11, 22, 33 and 44 s; the end at 45


@pytest.fixture(scope="module")
def default_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, str]]:
    repo = make_repository(tmp_path_factory.mktemp("long_repo"))
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("long_logs"))
    port = free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker(backend="python")
        mesh.start_gateway(processes=1, CONCH_GATEWAY_GRPC_PORT=str(port))
        mesh.wait_ready(MODELS, timeout_s=120)
        yield mesh, f"127.0.0.1:{port}"
    finally:
        mesh.stop()


def test_a_45_s_stream_arrives_whole_through_grpc_and_sse(default_mesh: tuple[Mesh, str]) -> None:
    mesh, grpc_url = default_mesh
    grpc: dict[str, Any] = {}

    def through_grpc() -> None:
        grpc["started"], grpc["items"], _ = grpc_stream(
            grpc_url,
            [SPACING_MS] * COUNT,
            COUNT + 1,
            timeout_s=SPACING_MS / 1000 + 5,
            wait_ms=WAIT_MS,
            enable_empty_final_response=True,
        )

    thread = threading.Thread(target=through_grpc)
    thread.start()
    body = {"IN": list(range(COUNT)), "DELAY": [SPACING_MS] * COUNT, "WAIT": [WAIT_MS]}
    started, events = sse_events(
        f"http://{mesh.url}/v2/models/repeat_int32/generate_stream", body, timeout_s=60
    )
    ended = time.monotonic()
    thread.join(timeout=60)
    assert [e.get("OUT") for _, e in events] == list(range(COUNT)), events
    assert ended - started >= (SPACING_MS * COUNT + WAIT_MS) / 1000 - 0.5
    items = grpc["items"]
    values = [r.as_numpy("OUT").tolist() for _, r in items[:COUNT]]
    assert values == [[i] for i in range(COUNT)], items
    final = items[-1][1].get_response().parameters["triton_final_response"].bool_param
    assert final and items[-1][0] - grpc["started"] >= (SPACING_MS * COUNT + WAIT_MS) / 1000 - 0.5

"""One trace across the processes of a real mesh: gateway -> scheduler -> worker -> reply.

The services print their spans (``CONCH_TRACING=console``, exported every 100 ms); the test reads
them from each service's log and follows one request's trace id through all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync

pytest.importorskip("opentelemetry.sdk.trace")
pytestmark = pytest.mark.e2e

_SPAN = re.compile(r"^\{\n.*?^\}$", re.S | re.M)
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}


@pytest.fixture(scope="module")
def traced_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    repo = tmp_path_factory.mktemp("repo")
    (repo / "simple").symlink_to(model_repository / "simple", target_is_directory=True)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    mesh.env_overrides = {"CONCH_TRACING": "console", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    try:
        mesh.start_all()
        mesh.wait_ready(["simple"])
        yield mesh
    finally:
        mesh.stop()


def _spans(mesh: Mesh) -> list[dict]:
    assert mesh.log_dir is not None
    spans = []
    for path in mesh.log_dir.glob("*.log"):
        for block in _SPAN.findall(path.read_text(errors="replace")):
            try:
                span = json.loads(block)
            except json.JSONDecodeError:
                continue
            span["_service"] = span["resource"]["attributes"]["service.name"]
            spans.append(span)
    return spans


def test_one_trace_crosses_gateway_scheduler_and_worker(traced_mesh: Mesh) -> None:
    response = httpx.post(f"http://{traced_mesh.url}/v2/models/simple/infer", json=BODY, timeout=10)
    assert response.status_code == 200, response.text
    wanted = {
        "conch.gateway.infer",
        "conch.scheduler.queue",
        "conch.worker.execute",
        "conch.worker.reply",
    }

    def last_trace() -> dict[str, dict]:
        """The spans of the last trace with a gateway root, by name."""
        spans = _spans(traced_mesh)
        roots = [s for s in spans if s["name"] == "conch.gateway.infer"]
        if not roots:
            return {}
        trace_id = roots[-1]["context"]["trace_id"]
        return {s["name"]: s for s in spans if s["context"]["trace_id"] == trace_id}

    by_name = eventually_sync(last_trace, lambda found: set(found) >= wanted, 10, every=0.2)
    assert set(by_name) >= wanted, f"spans seen: {sorted(by_name)}\n{traced_mesh.logs()}"
    root = by_name["conch.gateway.infer"]
    assert root["parent_id"] is None
    assert root["attributes"]["model"] == "simple"
    for name in wanted - {"conch.gateway.infer"}:
        assert by_name[name]["parent_id"] == root["context"]["span_id"], name
    assert by_name["conch.gateway.infer"]["_service"] == "conch-gateway"
    assert by_name["conch.scheduler.queue"]["_service"] == "conch-scheduler"
    assert by_name["conch.worker.execute"]["_service"] == "conch-worker-onnxruntime"

"""The generation panels against a real Prometheus: the continuous batching engine records its
metrics through Triton's custom metrics API (``workers.python.pb_metrics``, what a Python model's
``pb_utils.MetricFamily`` is), the worker's renderer (``workers.python.custom_metrics``) serves
them, Prometheus scrapes them, and every query of the dashboards' generation row returns data.

The mesh-wide check (tests/observability/test_live_prometheus.py) covers these panels once the
live mesh serves the generative model (it needs issue 14's streaming path).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from conch.local_prometheus import LocalPrometheus
from conch.ports import free_port
from tests.mesh import needs_prometheus
from tests.unit.generative_helpers import VOCAB, Collector, seeded_model
from workers.generative.engine import Engine
from workers.generative.loop import EngineLoop
from workers.generative.metrics import FamilyMetrics
from workers.python import custom_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers" / "python"))
import pb_metrics

sys.path.pop(0)

pytestmark = [pytest.mark.e2e, needs_prometheus]
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "conch-workers.json"


class _Metrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = custom_metrics.render([pb_metrics.snapshot(0)[1]]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _generation_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "conch_generation_" in target["expr"]
    ]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prometheus = LocalPrometheus(
        {"conch-worker": [f"127.0.0.1:{server.server_address[1]}"]},
        free_port(),
        scrape_interval="1s",
        workdir=tmp_path_factory.mktemp("prometheus"),
    )
    engine = Engine(
        seeded_model(),
        VOCAB,
        max_sequences=4,
        metrics=FamilyMetrics(pb_metrics, {"model": "tiny_gpt_live", "version": "1"}),
    )
    loop = EngineLoop(engine).start()
    try:
        prometheus.start()
        prometheus.wait_ready()
        collect = Collector()
        ends = time.monotonic() + 6.0  # generations across several scrapes: rates have data
        round_ = 0
        while time.monotonic() < ends:
            for i in range(6):
                engine.submit(collect.generation(f"{round_}-{i}", "The", max_tokens=30))
            engine.cancel(f"{round_}-5")
            round_ += 1
            time.sleep(0.5)
        time.sleep(3.0)  # the last scrape after the last generation
        yield prometheus
    finally:
        loop.stop()
        prometheus.stop()
        server.shutdown()


def test_every_generation_panel_returns_data(prometheus: LocalPrometheus) -> None:
    queries = _generation_queries()
    assert len(queries) >= 7  # TTFT and inter-token quantiles, tokens, sequences, KV, cancels
    empty = []
    for title, expr in queries:
        instantiated = expr.replace("$__rate_interval", "30s").replace("$model", ".*")
        response = httpx.get(
            f"{prometheus.url}/api/v1/query", params={"query": instantiated}, timeout=10
        )
        body = response.json()
        assert body["status"] == "success", (expr, body)
        if not body["data"]["result"]:
            empty.append(f"{title}: {expr}")
    assert not empty, "generation panels without data:\n" + "\n".join(empty)

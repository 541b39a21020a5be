"""The mesh and a real Prometheus: every dashboard query and recording rule returns data, the
statistics extension agrees with the Prometheus counters, and the histogram p99 agrees with
the load generator's p99 within one bucket.

The mesh: one scheduler, one ONNX Runtime worker serving ``simple`` versions 1 and 2, a gateway
with two processes (multiprocess metrics). Prometheus scrapes all of them every second with the
project's scrape configuration (conch/local_prometheus.py) and rules (deploy/prometheus/rules).
"""

from __future__ import annotations

import bisect
import gc
import http.client
import json
import math
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from conch.local_prometheus import RULES_DIR, LocalPrometheus
from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared import metrics
from tests.mesh import Mesh, flush_database, needs_prometheus
from tests.waiting import until_sync

pytestmark = [pytest.mark.e2e, needs_prometheus]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
MODEL = "simple"
BODY = {
    "inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
    ]
}
LOAD_SECONDS = 6.0
CONCURRENCY = 4
INTERVAL_S = 1 / 15  # per client: 60 requests/s in all


def _two_version_repository(source: Path, target: Path) -> Path:
    """``simple`` with versions 1 and 2 (same ONNX file), both served."""
    shutil.copytree(source / MODEL, target / MODEL)
    shutil.copytree(target / MODEL / "1", target / MODEL / "2")
    config = target / MODEL / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { all { } }\n")
    return target


class Live:
    def __init__(self, mesh: Mesh, prometheus: LocalPrometheus, ports: dict[str, int]):
        self.mesh = mesh
        self.prometheus = prometheus
        self.ports = ports
        self.latencies: list[float] = []
        self.load_started = 0.0
        self.load_ended = 0.0
        self.baseline_at = 0.0
        self.warmup = 3 * CONCURRENCY

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.prometheus.url}/api/v1/query", params={"query": expr}, timeout=10
        )
        body = response.json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def scalar(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])


def _drive_load(live: Live) -> None:
    """CONCURRENCY clients for LOAD_SECONDS; versions 1 (pinned) and 2 (routed: the newest)."""
    url = f"http://{live.mesh.url}/v2/models/{MODEL}"
    lock = threading.Lock()
    warmed = threading.Barrier(CONCURRENCY + 1)
    go = threading.Event()
    stop_at = 0.0
    body = json.dumps(BODY).encode()
    headers = {"Content-Type": "application/json"}

    def client(index: int) -> None:
        # http.client on one keep-alive connection: the client adds as little as it can.
        path = f"/v2/models/{MODEL}/versions/1/infer" if index % 2 else f"/v2/models/{MODEL}/infer"
        local: list[float] = []
        connection = http.client.HTTPConnection("127.0.0.1", live.mesh.http_port, timeout=10)
        try:
            for _ in range(3):  # connect and warm up, untimed, before the measured window
                connection.request("POST", path, body=body, headers=headers)
                connection.getresponse().read()
            warmed.wait()
            go.wait()
            next_at = time.monotonic()
            while next_at < stop_at:
                # Paced (open loop), well below what two cores can serve: the p99 compared is
                # the mesh's, not CPU run-queue waits of an overloaded test machine.
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += INTERVAL_S
                started = time.perf_counter()
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                local.append(time.perf_counter() - started)
                assert response.status == 200, payload
        finally:
            connection.close()
        with lock:
            live.latencies.extend(local)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    warmed.wait()
    # The baseline: a moment whose latest scrape holds every warm-up request and no load, read
    # as such (``@``) rather than guessed from a window a late scrape could stretch.
    _wait_for(
        live,
        f'sum(conch_gateway_requests_total{{model="{MODEL}"}})',
        lambda v: v >= live.warmup,
        "warm-up scraped",
    )
    live.baseline_at = time.time()
    gc.disable()  # the load generator must not time its own garbage collections
    try:
        live.load_started = time.time()
        stop_at = time.monotonic() + LOAD_SECONDS
        go.set()
        for thread in threads:
            thread.join()
    finally:
        gc.enable()
    live.load_ended = time.time()
    # A refused caller (unknown API key): the per-tenant rejection counter.
    response = httpx.post(f"{url}/infer", json=BODY, headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401, response.text


@pytest.fixture(scope="module")
def live(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    flush_database(redis_server.url)
    repo = _two_version_repository(model_repository, tmp_path_factory.mktemp("repo"))
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    ports = {"scheduler": free_port(), "worker": free_port()}
    prometheus = LocalPrometheus(
        {
            "conch-gateway": [f"127.0.0.1:{mesh.http_port}"],
            "conch-scheduler": [f"127.0.0.1:{ports['scheduler']}"],
            "conch-worker": [f"127.0.0.1:{ports['worker']}"],
        },
        free_port(),
        scrape_interval="1s",
        workdir=tmp_path_factory.mktemp("prometheus"),
    )
    try:
        prometheus.start()  # its first scrape comes ~6 s after start: overlap with the mesh's
        mesh.start_scheduler(CONCH_SCHEDULER_HEALTH_PORT=str(ports["scheduler"]))
        mesh.start_worker(CONCH_WORKER_HEALTH_PORT=str(ports["worker"]))
        mesh.start_gateway()
        mesh.wait_ready([MODEL])
        prometheus.wait_ready()
        live = Live(mesh, prometheus, ports)
        _wait_for(live, 'count(up{job=~"conch-.*"} == 1)', lambda v: v == 3, "targets up")
        _drive_load(live)
        # Every counter scraped after the last request, and the rules evaluated after that.
        total = len(live.latencies) + live.warmup
        _wait_for(
            live,
            f'sum(conch_gateway_requests_total{{model="{MODEL}"}})',
            lambda v: v >= total,
            "last requests scraped",
        )
        time.sleep(2.5)
        yield live
    finally:
        mesh.stop()
        prometheus.stop()


def _wait_for(live: Live, expr: str, ok, what: str, timeout_s: float = 20.0) -> None:
    value = None

    def met() -> bool:
        nonlocal value
        result = live.query(expr)
        if result:
            value = float(result[0]["value"][1])
            return ok(value)
        return False

    assert until_sync(met, timeout_s, every=0.25), (
        f"{what}: {expr} = {value} after {timeout_s} s\n{live.mesh.logs()}"
    )


def _panel_queries() -> list[tuple[str, str, str]]:
    queries = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                queries.append((path.stem, panel["title"], target["expr"]))
    return queries


def _instantiate(expr: str) -> str:
    return expr.replace("$__rate_interval", "30s").replace("$model", ".*")


def _gpu_query(expr: str) -> bool:
    return "nv_gpu_" in expr or "nv_energy" in expr


def _generation_query(expr: str) -> bool:
    return "conch_generation_" in expr


def _on_demand_query(expr: str) -> bool:
    return any(
        f"conch_{name}" in expr
        for name in ("model_loads", "model_unloads", "model_cold_start", "model_demand",
                     "worker_resident", "worker_model_memory_budget")
    )  # fmt: skip


def test_every_dashboard_query_returns_data(live: Live) -> None:
    from workers.gpu_metrics import load_nvml

    has_gpu = load_nvml() is not None
    empty = []
    checked = 0
    for dashboard, title, expr in _panel_queries():
        if _gpu_query(expr) and not has_gpu:
            continue  # nv_gpu_* exist only where NVML finds a GPU (tests/unit: GPU metrics)
        if _generation_query(expr):
            # This mesh serves no generative model (it needs the streaming path of issue 14);
            # the generation row is proven live in test_generation_metrics_live.py.
            continue
        if _on_demand_query(expr):
            # This mesh is not in on_demand mode: tests/e2e/test_on_demand.py and
            # tests/integration/test_on_demand_worker.py scrape them.
            continue
        checked += 1
        if not live.query(_instantiate(expr)):
            empty.append(f"{dashboard} / {title}: {expr}")
    assert checked >= 30
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)


def test_every_recording_rule_returns_data(live: Live) -> None:
    records = [
        rule["record"]
        for path in sorted(RULES_DIR.glob("*.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    ]
    assert len(records) >= 20
    empty = [name for name in records if not live.query(name)]
    assert not empty, f"recording rules without data: {empty}"
    rules = httpx.get(f"{live.prometheus.url}/api/v1/rules", timeout=10).json()
    health = [
        (r["name"], r.get("lastError"))
        for g in rules["data"]["groups"]
        for r in g["rules"]
        if r["health"] != "ok"
    ]
    assert not health, health
    alerts = httpx.get(f"{live.prometheus.url}/api/v1/alerts", timeout=10).json()
    firing = [a for a in alerts["data"]["alerts"] if a["state"] == "firing"]
    assert not firing, f"a healthy mesh fires no alert: {firing}"


def test_statistics_extension_agrees_with_prometheus(live: Live) -> None:
    stats = httpx.get(f"http://{live.mesh.url}/v2/models/{MODEL}/stats", timeout=10).json()
    by_version = {s["version"]: s for s in stats["model_stats"]}
    assert set(by_version) == {"1", "2"}

    def prom(metric: str, version: str) -> float:
        result = live.query(f'sum({metric}{{model="{MODEL}",version="{version}"}})')
        return float(result[0]["value"][1]) if result else 0.0

    total = 0
    for version, s in by_version.items():
        inference = s["inference_stats"]
        assert s["execution_count"] > 0
        assert prom("nv_inference_request_success", version) == inference["success"]["count"]
        assert prom("nv_inference_request_failure", version) == inference["fail"]["count"]
        assert prom("nv_inference_count", version) == s["inference_count"]
        assert prom("nv_inference_exec_count", version) == s["execution_count"]
        for field, metric in [
            ("queue", "nv_inference_queue_duration_us"),
            ("compute_input", "nv_inference_compute_input_duration_us"),
            ("compute_infer", "nv_inference_compute_infer_duration_us"),
            ("compute_output", "nv_inference_compute_output_duration_us"),
            ("success", "nv_inference_request_duration_us"),
        ]:
            assert prom(metric, version) == pytest.approx(inference[field]["ns"] / 1000, rel=1e-9)
        batches = sum(b["compute_infer"]["count"] for b in s["batch_stats"])
        assert batches == s["execution_count"]
        assert prom("conch_batch_size_count", version) == s["execution_count"]
        total += inference["success"]["count"]
    # Every request the load generator sent (and its warm-up) succeeded, each counted once.
    assert total == len(live.latencies) + live.warmup
    assert live.scalar(f'sum(conch_gateway_requests_total{{model="{MODEL}",code="OK"}})') == total


def test_histogram_p99_agrees_with_the_load_generator(live: Live) -> None:
    latencies = sorted(live.latencies)
    assert len(latencies) >= 200, f"too little load: {len(latencies)} requests"
    # Nearest rank, as histogram_quantile ranks: the ceil(0.99 n)-th fastest request.
    client_p99 = latencies[math.ceil(0.99 * len(latencies)) - 1]
    buckets_of = f'sum by (le) (conch_request_duration_seconds_bucket{{model="{MODEL}"}}'
    prom_p99 = live.scalar(
        f"histogram_quantile(0.99, {buckets_of}) - {buckets_of} @ {live.baseline_at:.3f}))"
    )
    # Within one bucket, as the issue asks. And never beyond the client's bucket: the gateway's
    # clock (from the request's headers to its answer) runs inside the client's for every
    # request, and histogram_quantile interpolates at most up to that bucket's upper edge.
    buckets = metrics.LATENCY_BUCKETS
    client_bucket = bisect.bisect_left(buckets, client_p99)
    prom_bucket = bisect.bisect_left(buckets, prom_p99)
    upper_edge = buckets[client_bucket] if client_bucket < len(buckets) else math.inf
    assert abs(client_bucket - prom_bucket) <= 1 and prom_p99 <= upper_edge, (
        f"p99: load generator {client_p99 * 1000:.2f} ms (bucket {client_bucket}), "
        f"Prometheus {prom_p99 * 1000:.2f} ms (bucket {prom_bucket}); buckets {buckets}"
    )


def test_services_expose_triton_names_and_mesh_families(live: Live) -> None:
    worker = httpx.get(f"http://127.0.0.1:{live.ports['worker']}/metrics", timeout=5).text
    for name in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert f"# TYPE {name} counter\n" in worker, name  # Triton's names: no _total
        assert re.search(rf'^{name}{{model="{MODEL}",version="1"', worker, re.M), name
    assert re.search(r'^nv_model_load_duration_secs\{model="simple",version="2"\} ', worker, re.M)
    assert 'conch_worker_model_instances{backend="onnxruntime",model="simple",version="1"}' in (
        worker
    )
    for reason in metrics.FAILURE_REASONS:
        assert f'reason="{reason}"' in worker
    scheduler = httpx.get(f"http://127.0.0.1:{live.ports['scheduler']}/metrics", timeout=5).text
    assert 'nv_inference_pending_request_count{model="simple",version="1"} 0.0' in scheduler
    assert 'conch_queue_depth{model="simple",priority="1",version="2"} 0.0' in scheduler
    assert "conch_queue_duration_seconds_bucket" in scheduler
    assert 'conch_model_ready_instances{model="simple",version="1"} 1.0' in scheduler
    # The gateway's two processes, summed: its count equals every request sent.
    gateway = httpx.get(f"http://{live.mesh.url}/metrics", timeout=5).text
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in gateway.splitlines()
        if line.startswith("conch_request_duration_seconds_count{")
    )
    assert counted == len(live.latencies) + live.warmup
    assert 'reason="unauthenticated",tenant="unknown"' in gateway
    pids = {
        line.split('pid="')[1].split('"')[0] for line in gateway.splitlines() if 'pid="' in line
    }
    assert not pids  # aggregated, not one series per process

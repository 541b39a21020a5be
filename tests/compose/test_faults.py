"""Faults on the live stack, under load through Envoy: a worker killed, a gateway killed, a
worker backend scaled to two, Redis restarted. Run last (scripts/compose-test.sh orders it)."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.compose.conftest import (
    compose,
    containers,
    inspect,
    stack_ready,
    subprocess_run,
    wait_for,
)


@dataclass
class Load:
    """Requests to `simple` from a few threads, each answer checked; failures with their time."""

    sent: int = 0
    ok: int = 0
    failures: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, url: str, seed: int) -> None:
        client = httpclient.InferenceServerClient(url, connection_timeout=60, network_timeout=60)
        rng = np.random.default_rng(seed)
        while not self.stop.is_set():
            a = rng.integers(0, 1000, (1, 16), dtype=np.int32)
            b = rng.integers(0, 1000, (1, 16), dtype=np.int32)
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            with self.lock:
                self.sent += 1
            try:
                result = client.infer("simple", inputs)
                assert (result.as_numpy("OUTPUT0") == a + b).all()
                assert (result.as_numpy("OUTPUT1") == a - b).all()
                with self.lock:
                    self.ok += 1
            except Exception as exc:
                with self.lock:
                    self.failures.append((time.monotonic(), repr(exc)[:300]))
            time.sleep(0.02)


@contextmanager
def load(url: str, threads: int = 4) -> Iterator[Load]:
    state = Load()
    workers = [
        threading.Thread(target=state.run, args=(url, i), daemon=True) for i in range(threads)
    ]
    for w in workers:
        w.start()
    try:
        yield state
    finally:
        state.stop.set()
        for w in workers:
            w.join(timeout=90)


def _simple_stats(url: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/models/simple/stats", timeout=10) as r:
        return int(json.load(r)["model_stats"][0]["inference_count"])


def _restarted(container: str, count_before: int) -> bool:
    state = inspect(container)
    return (
        state["RestartCount"] > count_before
        and state["State"]["Running"]
        and state["State"].get("Health", {}).get("Status") == "healthy"
    )


def _crash(container: str) -> None:
    """What a crash looks like to Docker: the container's process killed (SIGKILL).

    `docker kill` marks a container as stopped by hand, and Docker leaves such a container
    down whatever its restart policy: a crash is the main process dying under Docker's feet.
    """
    pid = inspect(container)["State"]["Pid"]
    subprocess_run(["kill", "-9", str(pid)])


def _prometheus_instances(prometheus_url: str, expr: str) -> dict[str, float]:
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        result = json.load(response)["data"]["result"]
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in result}


def _scale_onnx_workers(count: int) -> None:
    """``docker compose up -d --scale worker-onnxruntime=N``, leaving the others as they are."""
    scale = ("--scale", f"worker-onnxruntime={count}")
    compose("up", "-d", "--no-recreate", "--wait", *scale, "worker-onnxruntime")


@pytest.fixture(scope="module")
def two_onnx_workers(http_url: str) -> Iterator[list[str]]:
    _scale_onnx_workers(2)
    ids = containers("worker-onnxruntime")
    assert len(ids) == 2, ids
    yield ids
    _scale_onnx_workers(1)
    wait_for("the stack ready again", stack_ready)


def test_a_scaled_worker_backend_takes_batches(
    http_url: str, prometheus_url: str, two_onnx_workers: list[str]
) -> None:
    expr = 'sum by (instance) (nv_inference_exec_count{job="conch-worker",model="simple"})'
    with load(http_url, threads=6) as state:

        def both_execute() -> bool:
            counts = _prometheus_instances(prometheus_url, expr)
            return len([v for v in counts.values() if v > 0]) >= 2

        wait_for(
            "both onnxruntime workers executing batches of simple",
            both_execute,
            timeout=90,
            pause=3,
        )
    assert state.failures == [], state.failures[:5]


def test_a_worker_killed_under_load_loses_and_repeats_nothing(
    http_url: str, two_onnx_workers: list[str]
) -> None:
    victim = two_onnx_workers[0]
    restarts = inspect(victim)["RestartCount"]
    before = _simple_stats(http_url)
    with load(http_url) as state:
        time.sleep(3)
        _crash(victim)
        time.sleep(8)
    assert state.ok > 0 and state.failures == [], state.failures[:5]
    assert state.ok == state.sent
    # Every request ran once: the statistics count each success once, none twice.
    wait_for(
        "the statistics settled", lambda: _simple_stats(http_url) - before >= state.ok, timeout=30
    )
    assert _simple_stats(http_url) - before == state.ok
    wait_for("the killed worker back by its restart policy", lambda: _restarted(victim, restarts))


def test_a_killed_gateway_is_routed_around(http_url: str) -> None:
    (victim,) = containers("gateway-1")
    restarts = inspect(victim)["RestartCount"]
    with load(http_url) as state:
        time.sleep(2)
        killed_at = time.monotonic()
        _crash(victim)
        time.sleep(10)
    # Only requests in flight on the dead gateway may fail, within a second or two of the kill.
    late = [f for f in state.failures if f[0] > killed_at + 3]
    assert late == [], late[:5]
    assert state.ok > 50
    wait_for("the killed gateway back by its restart policy", lambda: _restarted(victim, restarts))


def test_redis_restart_keeps_the_promise(http_url: str) -> None:
    """Redis keeps its data (AOF on a volume) and admission retries a refused connection until
    the request's deadline: a `docker compose restart redis` under load loses no request."""
    marker_key = "v2-compose-test-marker"
    compose("exec", "-T", "redis", "redis-cli", "SET", marker_key, "kept")
    with load(http_url, threads=2) as state:
        time.sleep(2)
        compose("restart", "redis")
        time.sleep(5)
    assert compose("exec", "-T", "redis", "redis-cli", "GET", marker_key).strip() == "kept"
    assert state.ok > 0 and state.failures == [], state.failures[:5]
    wait_for("the stack ready after the Redis restart", stack_ready)

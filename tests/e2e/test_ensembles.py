"""Ensembles across a mesh of real processes: two schedulers (both run every ensemble), an ONNX
Runtime worker, a Python worker and a gateway, with tritonclient as the client.

What a Triton user depends on: the ensemble's answer equals running its steps one after
another in process; its metadata, config, readiness and statistics read as Triton's; a failing
step fails the request naming the step and the model; a bad ensemble is refused at load with one
line; nothing of a request stays in Redis once it finished or expired; and, past Triton, a
scheduler SIGKILLed while it owns ensemble requests in flight costs them nothing (the other
scheduler resumes them), nor does a worker SIGKILLed mid-step. The kill tests run last: they
take processes away from the mesh.
"""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import redis
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FAST = {"CONCH_SCHEDULER_DEAD_BOUND_MS": "3000", "CONCH_SCHEDULER_RECLAIM_INTERVAL_MS": "300"}
FAST_WORKER = {"CONCH_WORKER_DEAD_BOUND_MS": "3000", "CONCH_WORKER_RECLAIM_INTERVAL_MS": "300"}
SHORT_TIMEOUT_MS = 1500

# Two python_probe steps: OUT = 4 * IN (+ probe_add at each step); a parameter slows each step.
PROBE_CHAIN = """\
name: "probe_chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "python_probe" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "doubled" } },
  { model_name: "python_probe" model_version: -1
    input_map { key: "INPUT0" value: "doubled" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"""

_BAD_HEAD = """\
name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
"""


def _bad_step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


BAD = {
    "bad_unknown": [_bad_step("no_such_model", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})],
    "bad_twice": [
        _bad_step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT0": "OUT"}),
        _bad_step("add_sub", {"INPUT0": "IN", "INPUT1": "IN"}, {"OUTPUT0": "OUT"}),
    ],
    "bad_never": [_bad_step("add_sub", {"INPUT0": "IN", "INPUT1": "ghost"}, {"OUTPUT0": "OUT"})],
    "bad_cycle": [
        _bad_step("add_sub", {"INPUT0": "IN", "INPUT1": "b"}, {"OUTPUT0": "a"}),
        _bad_step("add_sub", {"INPUT0": "a", "INPUT1": "IN"}, {"OUTPUT0": "b", "OUTPUT1": "OUT"}),
    ],
}
BAD_TEXT = {
    "bad_unknown": "composing model 'no_such_model' is not in the model repository",
    "bad_twice": "ensemble tensor 'OUT' can appear in an output map only once",
    "bad_never": "ensemble tensor 'ghost' used by step 0 (model 'add_sub')",
    "bad_cycle": "ensemble 'bad_cycle' has a cycle",
}


def write_repository(repo: Path) -> None:
    onnx_models = ["mlp", "add_sub", "ens_preprocess", "ens_summary", "mlp_ensemble"]
    onnx_models.append("add_sub_chain")
    for script, names in (
        ("make_models.py", onnx_models),
        ("make_backend_models.py", ["python_probe"]),
    ):
        argv = [sys.executable, str(ROOT / "examples" / script), str(repo)]
        for name in names:
            argv += ["--model", name]
        subprocess.run(argv, check=True, capture_output=True)
    for name, text in {"probe_chain": PROBE_CHAIN}.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(text)
    for name, steps in BAD.items():
        (repo / name / "1").mkdir(parents=True)
        config = _BAD_HEAD.format(name=name) + "ensemble_scheduling { step [ "
        (repo / name / "config.pbtxt").write_text(config + ", ".join(steps) + " ] }\n")


@dataclass
class EnsembleMesh:
    mesh: Mesh
    repo: Path
    redis_url: str
    # A second gateway whose requests have a short deadline.
    short: str
    # /metrics of the two schedulers (each records the ensemble requests it finished).
    scheduler_metrics: list[str]


@pytest.fixture(scope="module")
def ens_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EnsembleMesh]:
    repo = tmp_path_factory.mktemp("ensemble_repo")
    write_repository(repo)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    short, health = free_port(), [free_port(), free_port()]
    try:
        for name, port in zip(("scheduler-a", "scheduler-b"), health, strict=True):
            mesh.start_scheduler(name, CONCH_SCHEDULER_HEALTH_PORT=str(port), **FAST)
        mesh.start_worker("worker")
        mesh.start_worker("worker-py-a", backend="python", **FAST_WORKER)
        mesh.start_worker("worker-py-b", backend="python", **FAST_WORKER)
        mesh.start_gateway(processes=1, CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false")
        mesh.start_gateway(
            processes=1,
            name="gateway-short",
            CONCH_GATEWAY_HTTP_PORT=str(short),
            CONCH_GATEWAY_DEFAULT_TIMEOUT_MS=str(SHORT_TIMEOUT_MS),
        )
        mesh.wait_ready(["mlp_ensemble", "add_sub_chain", "probe_chain"], timeout_s=120)
        yield EnsembleMesh(
            mesh,
            repo,
            redis_server.url,
            f"localhost:{short}",
            [f"http://127.0.0.1:{port}/metrics" for port in health],
        )
    finally:
        mesh.stop()


def _run_onnx(repo: Path, model: str, **inputs: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(str(repo / model / "1" / "model.onnx"))
    return session.run(None, inputs)


def _fp32(name: str, data: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return tensor


def _int64(name: str, data: np.ndarray) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(data.shape), "INT64")
    tensor.set_data_from_numpy(data)
    return tensor


def _state_keys(url: str, model: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter(match=f"conch:m:{{{model}}}:ens:*:r:*", count=1000))
    finally:
        client.close()


def _wait_no_state(url: str, model: str, timeout_s: float = 10.0) -> list[bytes]:
    """The run-state keys left once none were, or ``timeout_s`` passed."""
    return eventually_sync(lambda: _state_keys(url, model), lambda left: not left, timeout_s, 0.1)


def test_ensemble_output_equals_its_steps_run_in_process(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    x = np.random.default_rng(7).standard_normal((3, 256)).astype(np.float32)
    result = client.infer("mlp_ensemble", [_fp32("INPUT", x)])
    repo = ens_mesh.repo
    (scaled,) = _run_onnx(repo, "ens_preprocess", INPUT0=x)
    (logits,) = _run_onnx(repo, "mlp", INPUT0=scaled)
    (blocks,) = _run_onnx(repo, "ens_summary", INPUT0=scaled)
    total, delta = _run_onnx(repo, "add_sub", INPUT0=logits, INPUT1=blocks)
    np.testing.assert_allclose(result.as_numpy("SCORES"), total, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.as_numpy("DELTA"), delta, rtol=1e-5, atol=1e-5)
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    chain = client.infer("add_sub_chain", [_fp32("INPUT0", a), _fp32("INPUT1", b)])
    np.testing.assert_allclose(chain.as_numpy("OUTPUT0"), 2 * a + 2 * b)
    np.testing.assert_allclose(chain.as_numpy("OUTPUT1"), 2 * a - 2 * b)
    assert _wait_no_state(ens_mesh.redis_url, "mlp_ensemble") == []


def test_requested_outputs_and_concurrent_requests(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url, concurrency=16)
    inputs = [np.full((1, 256), i, np.float32) for i in range(32)]
    pending = [
        client.async_infer(
            "mlp_ensemble", [_fp32("INPUT", x)], outputs=[httpclient.InferRequestedOutput("DELTA")]
        )
        for x in inputs
    ]
    for x, handle in zip(inputs, pending, strict=True):
        result = handle.get_result()
        assert result.as_numpy("SCORES") is None
        (scaled,) = _run_onnx(ens_mesh.repo, "ens_preprocess", INPUT0=x)
        (logits,) = _run_onnx(ens_mesh.repo, "mlp", INPUT0=scaled)
        (blocks,) = _run_onnx(ens_mesh.repo, "ens_summary", INPUT0=scaled)
        np.testing.assert_allclose(result.as_numpy("DELTA"), logits - blocks, rtol=1e-4, atol=1e-4)


def test_metadata_config_readiness_and_statistics(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    metadata = client.get_model_metadata("mlp_ensemble")
    assert metadata["platform"] == "ensemble"
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT"]
    assert [o["name"] for o in metadata["outputs"]] == ["SCORES", "DELTA"]
    config = client.get_model_config("mlp_ensemble")
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["ens_preprocess", "mlp", "ens_summary", "add_sub"]
    assert client.is_model_ready("mlp_ensemble")

    def stats(model: str) -> dict:
        return client.get_inference_statistics(model)["model_stats"][0]

    counted = _success_metric(ens_mesh.scheduler_metrics, "mlp_ensemble")
    before = {m: stats(m) for m in ("mlp_ensemble", "ens_preprocess", "ens_summary", "mlp")}
    client.infer("mlp_ensemble", [_fp32("INPUT", np.ones((4, 256), np.float32))])
    after = {m: stats(m) for m in before}
    for model in before:  # the ensemble's own counts and each composing model's
        added = after[model]["inference_count"] - before[model]["inference_count"]
        assert added == 4, model
    success = after["mlp_ensemble"]["inference_stats"]["success"]
    assert success["count"] == before["mlp_ensemble"]["inference_stats"]["success"]["count"] + 1
    assert success["ns"] > 0
    # Triton's metric names for the ensemble's own counts, from the schedulers that ran it.
    assert _success_metric(ens_mesh.scheduler_metrics, "mlp_ensemble") == counted + 1


def _success_metric(urls: list[str], model: str) -> float:
    total = 0.0
    for url in urls:
        for line in httpx.get(url, timeout=5).text.splitlines():
            if line.startswith("nv_inference_request_success{") and f'model="{model}"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_failed_step_fails_the_request_naming_step_and_model(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    ok = client.infer("probe_chain", [_int64("IN", np.array([[3]], np.int64))])
    assert ok.as_numpy("OUT").tolist() == [[12]]
    with pytest.raises(InferenceServerException) as raised:
        client.infer("probe_chain", [_int64("IN", np.array([[-2]], np.int64))])
    message = raised.value.message()
    assert "step 0 (model 'python_probe') failed" in message, message
    assert "INPUT0 holds -2" in message
    assert raised.value.status() == "400"
    assert _wait_no_state(ens_mesh.redis_url, "probe_chain") == []


def test_the_callers_parameters_reach_every_step(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    result = client.infer(
        "probe_chain", [_int64("IN", np.array([[1]], np.int64))], parameters={"probe_add": 1}
    )
    assert result.as_numpy("OUT").tolist() == [[(1 * 2 + 1) * 2 + 1]]


def test_an_expired_request_is_answered_and_its_state_deleted(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.short)
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as raised:
        client.infer(
            "probe_chain",
            [_int64("IN", np.array([[5]], np.int64))],
            parameters={"probe_sleep_ms": 1000},
        )
    assert "timeout" in raised.value.message().lower()
    assert time.monotonic() - started < SHORT_TIMEOUT_MS / 1000 + 2
    assert _wait_no_state(ens_mesh.redis_url, "probe_chain") == []


def test_bad_ensembles_are_refused_at_load_with_one_line(ens_mesh: EnsembleMesh) -> None:
    client = redis.Redis.from_url(ens_mesh.redis_url)
    try:
        errors = {k.decode(): v.decode() for k, v in client.hgetall(keys.load_errors()).items()}
    finally:
        client.close()
    for name, text in BAD_TEXT.items():
        assert text in errors.get(name, ""), (name, errors.get(name))
        assert "\\n" not in errors[name]
    http = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    assert not http.is_model_ready("bad_cycle")
    assert http.is_server_ready()  # a failed model does not hold the server back


def test_the_repository_api_unloads_and_loads_an_ensemble(ens_mesh: EnsembleMesh) -> None:
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    x = np.ones((1, 256), np.float32)
    client.unload_model("mlp_ensemble")
    # Announced on the change feed, so every scheduler and gateway process hears of it at once
    # and the schedulers leave its readiness set: within the 10 s safety poll with room to spare.
    unloaded = until_sync(lambda: not client.is_model_ready("mlp_ensemble"), 8, every=0.1)
    assert unloaded, "mlp_ensemble still ready 8 s after its unload"
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["mlp_ensemble"].get("state") != "READY"
    assert client.is_model_ready("mlp")  # its composing models stay
    client.load_model("mlp_ensemble")
    until_sync(lambda: client.is_model_ready("mlp_ensemble"), 20, every=0.1)
    assert client.infer("mlp_ensemble", [_fp32("INPUT", x)]).as_numpy("SCORES").shape == (1, 16)
    with pytest.raises(InferenceServerException) as raised:  # a bad one: its one line
        client.load_model("bad_cycle")
    assert "ensemble 'bad_cycle' has a cycle" in raised.value.message()


def test_an_ensemble_survives_a_scheduler_sigkill_mid_flight(ens_mesh: EnsembleMesh) -> None:
    """Requests in flight when one scheduler dies are finished by the other: those it owned are
    reclaimed after the dead bound and resumed from their state in Redis."""
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url, concurrency=32)
    values = list(range(1, 33))
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        futures = [
            pool.submit(
                client.infer,
                "probe_chain",
                [_int64("IN", np.array([[v]], np.int64))],
                parameters={"probe_sleep_ms": 300},
            )
            for v in values
        ]
        time.sleep(0.5)  # every request is in flight, its first step running or queued
        owned = _owned_by_scheduler(ens_mesh.redis_url, "probe_chain")
        ens_mesh.mesh.kill("scheduler-a")
        results = [f.result(timeout=60) for f in futures]
    assert [r.as_numpy("OUT").tolist() for r in results] == [[[4 * v]] for v in values]
    assert _wait_no_state(ens_mesh.redis_url, "probe_chain") == []
    assert len(owned) == 2 and all(count > 0 for count in owned.values()), owned


def _owned_by_scheduler(url: str, model: str) -> dict[str, int]:
    """Ensemble requests in flight, by the scheduler that owns them (pending in its group)."""
    client = redis.Redis.from_url(url)
    try:
        summary = client.xpending(f"conch:m:{{{model}}}:req:1:p1", "scheduler")
    finally:
        client.close()
    return {c["name"].decode(): int(c["pending"]) for c in summary["consumers"]}


def test_an_ensemble_survives_a_worker_sigkill_mid_step(ens_mesh: EnsembleMesh) -> None:
    """The steps a killed worker was executing are taken over by the other worker after the
    dead bound; every ensemble request completes with the right answer."""
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url, concurrency=16)
    values = list(range(100, 116))
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [
            pool.submit(
                client.infer,
                "probe_chain",
                [_int64("IN", np.array([[v]], np.int64))],
                parameters={"probe_sleep_ms": 300},
            )
            for v in values
        ]
        time.sleep(0.8)  # both workers are executing steps
        ens_mesh.mesh.kill("worker-py-a")
        results = [f.result(timeout=60) for f in futures]
    assert [r.as_numpy("OUT").tolist() for r in results] == [[[4 * v]] for v in values]
    assert _wait_no_state(ens_mesh.redis_url, "probe_chain") == []


def test_an_ensemble_is_ready_only_while_its_composing_models_are(ens_mesh: EnsembleMesh) -> None:
    """Last: it stops the Python worker. probe_chain's steps run on python_probe only."""
    client = httpclient.InferenceServerClient(ens_mesh.mesh.url)
    assert client.is_model_ready("probe_chain") and client.is_model_ready("mlp_ensemble")
    ens_mesh.mesh.kill("worker-py-b", signal.SIGTERM)  # a clean stop leaves the readiness sets
    gone = until_sync(lambda: not client.is_model_ready("probe_chain"), 20, every=0.1)
    assert gone, "probe_chain still ready 20 s after its worker stopped"
    assert client.is_model_ready("mlp_ensemble")  # its models are all ONNX

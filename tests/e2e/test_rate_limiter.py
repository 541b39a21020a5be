"""Triton's rate limiter across the fleet, and KIND_MODEL, through real workers and clients.

Python models that sleep for their input's seconds and answer when they entered and left
``execute``: two models on two workers with the rate limiter on share a global resource of one
copy, so their executions never overlap; the same pair on a worker with it off overlap. A worker
stopped (SIGSTOP) while it holds the resource gives it back once its lease ran out. A KIND_MODEL
instance of a Python model is created without a device: the model reads "MODEL".
"""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from conch.private_redis import PrivateRedis
from shared.wire import keys
from tests.mesh import Mesh, flush_database, sync_redis
from tests.waiting import until_sync

pytestmark = pytest.mark.e2e

LEASE_MS = 1500

MODEL_PY = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.kind = args["model_instance_kind"]

    def execute(self, requests):
        responses = []
        for request in requests:
            seconds = pb_utils.get_input_tensor_by_name(request, "SECONDS").as_numpy()
            enter = time.time()
            time.sleep(float(seconds.reshape(-1)[0]))
            span = np.array([enter, time.time()], np.float64)
            kind = np.array([self.kind.encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("SPAN", span), pb_utils.Tensor("KIND", kind)]
            ))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "SECONDS" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] }},
  {{ name: "KIND" data_type: TYPE_STRING dims: [ 1 ] }}
]
instance_group [ {{
  kind: {kind}
  count: 1
  rate_limiter {{ resources [ {{ name: "R" count: 1 global: true }} ] priority: 1 }}
}} ]
"""

LIMITED = ["rl_a", "rl_b"]
UNLIMITED = ["free_a", "free_b"]
OWN_PLACE = "own_place"


def _model(repo: Path, name: str, kind: str = "KIND_CPU") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(MODEL_PY)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name, kind=kind))


@pytest.fixture(scope="module")
def rl_mesh(redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    repo = tmp_path_factory.mktemp("rate_limit_repo")
    for name in [*LIMITED, *UNLIMITED]:
        _model(repo, name)
    _model(repo, OWN_PLACE, "KIND_MODEL")
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    on = {"CONCH_WORKER_RATE_LIMIT": "execution_count"}
    lease = {"CONCH_WORKER_RATE_LIMIT_LEASE_MS": str(LEASE_MS)}
    try:
        mesh.start_scheduler()
        mesh.start_worker("w1", "python", CONCH_WORKER_MODELS="rl_a", **on, **lease)
        mesh.start_worker("w2", "python", CONCH_WORKER_MODELS="rl_b", **on, **lease)
        mesh.start_worker("w3", "python", CONCH_WORKER_MODELS="free_a,free_b,own_place")
        mesh.start_gateway(processes=1)
        mesh.wait_ready([*LIMITED, *UNLIMITED, OWN_PLACE], timeout_s=120)
        yield mesh
    finally:
        mesh.stop()


def _infer(url: str, model: str, seconds: float, timeout_s: float = 120) -> tuple[float, float]:
    client = httpclient.InferenceServerClient(url, network_timeout=timeout_s)
    tensor = httpclient.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([seconds], np.float32))
    enter, leave = client.infer(model, [tensor]).as_numpy("SPAN").tolist()
    return enter, leave


def _spans(url: str, models: list[str], each: int, seconds: float) -> list[tuple[float, float]]:
    calls = [model for model in models for _ in range(each)]
    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda m: _infer(url, m, seconds), calls))


def _overlaps(spans: list[tuple[float, float]]) -> int:
    ordered = sorted(spans)
    return sum(1 for a, b in itertools.pairwise(ordered) if b[0] < a[1])


def test_instances_sharing_one_copy_never_execute_together(rl_mesh: Mesh) -> None:
    spans = _spans(rl_mesh.url, LIMITED, each=3, seconds=0.3)
    assert len(spans) == 6
    assert _overlaps(spans) == 0, sorted(spans)


def test_with_the_rate_limiter_off_they_do(rl_mesh: Mesh) -> None:
    spans = _spans(rl_mesh.url, UNLIMITED, each=3, seconds=0.3)
    assert _overlaps(spans) >= 1, sorted(spans)


def test_a_stalled_worker_gives_its_copy_back_within_its_lease(rl_mesh: Mesh) -> None:
    redis = sync_redis(rl_mesh.redis_url)
    resource = keys.rate_resource("R", "global")
    with ThreadPoolExecutor(1) as pool:
        long = pool.submit(_infer, rl_mesh.url, "rl_a", 8.0)
        held = until_sync(
            lambda: any(f[:2] in (b"h:", "h:") for f in redis.hkeys(resource)), within=20
        )
        assert held, "rl_a never took the resource"
        rl_mesh.signal("w1", signal.SIGSTOP)
        try:
            started = time.monotonic()
            _infer(rl_mesh.url, "rl_b", 0.05, timeout_s=LEASE_MS / 1000 + 10)
            waited = time.monotonic() - started
        finally:
            rl_mesh.signal("w1", signal.SIGCONT)
        long.result(timeout=60)
    assert waited < LEASE_MS / 1000 + 3.0, f"rl_b waited {waited:.1f} s for a stalled holder"


def test_a_kind_model_instance_is_placed_by_the_model(rl_mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(rl_mesh.url)
    tensor = httpclient.InferInput("SECONDS", [1], "FP32")
    tensor.set_data_from_numpy(np.array([0.0], np.float32))
    assert client.infer(OWN_PLACE, [tensor]).as_numpy("KIND").tolist() == [b"MODEL"]

"""Helpers for the traffic policy tests and figures: a model repository with two versions of
``simple`` and a slow priority model, an admin client, and load drivers (aiohttp, closed and open
loop) that record each answer's status, version and latency."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from tests.mesh import Mesh

ADMIN_TOKEN = "test-admin-token-0123456789"

# ``simple`` serving every version on disk (Triton's default policy serves only the newest).
VERSION_POLICY_ALL = "version_policy: { all { } }\n"

# A Python model that takes SLOW_MS per batch: a worker it saturates with little CPU.
SLOW_MS = 20
SLOW_CONFIG = """\
name: "slow"
backend: "python"
max_batch_size: 2
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching {
  priority_levels: 2
  default_priority_level: 2
  default_queue_policy { max_queue_size: 400 }
}
"""
SLOW_MODEL = f"""\
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLOW_MS} / 1000)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                                    .as_numpy())
                ]
            )
            for r in requests
        ]
"""


def make_policy_repository(source: Path, target: Path, versions: tuple[int, ...] = (1, 3)) -> Path:
    """``simple`` (ONNX, the given versions, all served) and ``slow`` (Python, 2 priorities)."""
    simple = target / "simple"
    simple.mkdir(parents=True)
    config = (source / "simple" / "config.pbtxt").read_text()
    (simple / "config.pbtxt").write_text(config + VERSION_POLICY_ALL)
    for version in versions:
        shutil.copytree(source / "simple" / "1", simple / str(version))
    slow = target / "slow"
    (slow / "1").mkdir(parents=True)
    (slow / "config.pbtxt").write_text(SLOW_CONFIG)
    (slow / "1" / "model.py").write_text(SLOW_MODEL)
    return target


def simple_body(value: int = 1) -> dict[str, Any]:
    data = [value] * 16
    return {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": data},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": data},
        ]
    }


def slow_body(priority: int) -> dict[str, Any]:
    return {
        "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [priority]}],
        "parameters": {"priority": priority},
    }


class Admin:
    """The admin API over httpx."""

    def __init__(self, url: str, token: str = ADMIN_TOKEN):
        self.base = url if "://" in url else f"http://{url}"
        self.token = token

    def call(self, method: str, path: str, body: Any = None, token: str | None = None):
        token = self.token if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, f"{self.base}{path}", json=body, headers=headers, timeout=180)

    def weights(self, model: str, weights: dict[str, int]) -> httpx.Response:
        return self.call("PUT", f"/v2/admin/models/{model}/weights", {"weights": weights})


@dataclass
class Answer:
    status: int
    version: str | None
    latency_s: float
    sent_at: float
    tag: Any = None
    retry_after: str | None = None
    error: str = ""


@dataclass
class Driver:
    """Send inference requests through aiohttp and keep every answer."""

    url: str
    answers: list[Answer] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url if "://" in self.url else f"http://{self.url}"

    async def _one(
        self,
        session: aiohttp.ClientSession,
        path: str,
        body: dict[str, Any],
        headers: dict[str, str],
        tag: Any,
    ) -> Answer:
        sent = time.perf_counter()
        try:
            async with session.post(f"{self.base}{path}", json=body, headers=headers) as resp:
                payload = await resp.json(content_type=None)
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
        except aiohttp.ClientError as exc:
            payload, status, retry_after = {"error": f"{type(exc).__name__}: {exc}"}, 0, None
        answer = Answer(
            status=status,
            version=payload.get("model_version") if isinstance(payload, dict) else None,
            latency_s=time.perf_counter() - sent,
            sent_at=sent,
            tag=tag,
            retry_after=retry_after,
            error=payload.get("error", "") if isinstance(payload, dict) else "",
        )
        self.answers.append(answer)
        return answer

    async def closed_loop(
        self,
        count: int,
        concurrency: int,
        request: Callable[[int], tuple[str, dict[str, Any], dict[str, str], Any]],
    ) -> list[Answer]:
        """``count`` requests, at most ``concurrency`` in flight."""
        answers: list[Answer] = []
        next_index = 0
        connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                nonlocal next_index
                while next_index < count:
                    index = next_index
                    next_index += 1
                    path, body, headers, tag = request(index)
                    answers.append(await self._one(session, path, body, headers, tag))

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return answers

    async def open_loop(
        self,
        rate_per_s: float,
        duration_s: float,
        request: Callable[[int], tuple[str, dict[str, Any], dict[str, str], Any]],
    ) -> tuple[list[Answer], float]:
        """Send at a fixed rate for a duration, whatever the answers; returns the answers and
        the time from the first send to the last."""
        tasks: list[asyncio.Task[Answer]] = []
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.perf_counter()
            index = 0
            while True:
                due = start + index / rate_per_s
                if due - start >= duration_s:
                    break
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                path, body, headers, tag = request(index)
                tasks.append(asyncio.create_task(self._one(session, path, body, headers, tag)))
                index += 1
            last = time.perf_counter()
            answers = await asyncio.gather(*tasks)
        return list(answers), last - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def split(answers: list[Answer]) -> dict[str, float]:
    """Share of each answering version, in percent."""
    counts: dict[str, int] = {}
    for answer in answers:
        counts[str(answer.version)] = counts.get(str(answer.version), 0) + 1
    total = sum(counts.values()) or 1
    return {version: 100 * n / total for version, n in sorted(counts.items())}


@contextlib.contextmanager
def running_policy_mesh(
    redis_url: str, repo: Path, log_dir: Path, processes: int, **gateway_env: str
) -> Iterator[Mesh]:
    """A mesh on the policy repository: a scheduler, an ONNX Runtime worker, a Python worker
    (``slow``) and a gateway of ``processes`` processes with the admin token, both models ready."""
    with Mesh(redis_url, repo, log_dir=log_dir) as mesh:
        mesh.start_scheduler()
        mesh.start_worker("worker-onnx", "onnxruntime")
        mesh.start_worker("worker-python", "python")
        mesh.start_gateway(
            processes=processes, CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN, **gateway_env
        )
        yield mesh.wait_ready(["simple", "slow"])

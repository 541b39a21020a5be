"""A real worker process in on_demand model control mode, driven by targeted control messages
as the placer sends them (``shared.fleet.control.send``), against the real Redis.

Each model is the example ``simple`` padded with a sparse 64 MiB file (no disk taken, but its
files' size: what the worker charges a model whose measured load is smaller, as a tiny ONNX
model's is), so that a budget of 200 MiB holds exactly three of them, whatever the machine.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from conch.ports import free_port
from shared.fleet import control, heartbeats, on_demand
from shared.fleet.control import ControlAck
from shared.wire import keys
from tests.mesh import Mesh
from tests.waiting import eventually, eventually_sync

PAD = 64 * 2**20
BUDGET = "200MiB"  # three padded models, not four
START_S = 60.0


def _repository(source: Path, root: Path, names: list[str]) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for name in names:
        shutil.copytree(source / "simple", repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "simple"', f'name: "{name}"'))
        with open(repo / name / "pad.bin", "wb") as pad:
            pad.truncate(PAD)
    return repo


@pytest.fixture
def mesh(redis_url: str, model_repository: Path, tmp_path: Path) -> Iterator[Mesh]:
    repo = _repository(model_repository, tmp_path, ["p", "a", "b", "c"])
    logs = tmp_path / "logs"
    logs.mkdir()
    with Mesh(redis_url, repo, log_dir=logs) as started:
        yield started


def _start_worker(mesh: Mesh, load_models: str, health_port: int = 0) -> None:
    mesh.start_worker(
        CONCH_WORKER_HEALTH_PORT=str(health_port),
        CONCH_WORKER_MODEL_CONTROL_MODE="on_demand",
        CONCH_WORKER_LOAD_MODELS=load_models,
        CONCH_WORKER_MODEL_MEMORY_BUDGET=BUDGET,
        CONCH_WORKER_DRAIN_ROUTE_DELAY_S="0.1",
    )


async def _worker_id(r: aioredis.Redis, mesh: Mesh) -> str:
    async def live() -> set[str]:
        mesh.raise_if_dead()
        return await heartbeats.live_ids(r, "worker")

    found = await eventually(live, bool, within=START_S, every=0.1)
    assert found, mesh.logs()
    return next(iter(found))


async def _send(r: aioredis.Redis, worker: str, action: str, model: str) -> ControlAck:
    reason = on_demand.LOAD_DEMAND if action == control.LOAD else on_demand.UNLOAD_IDLE
    message = control.new_message(action, model, target=worker, reason=reason)
    await control.send(r, message)
    acks, missing = await control.collect(r, message.id, {worker}, 20.0)
    assert not missing and len(acks) == 1, f"no answer to {action} {model}"
    return acks[0]


async def _resident(r: aioredis.Redis, worker: str) -> dict[str, on_demand.Resident]:
    return (await on_demand.read_resident(r, [worker]))[worker]


def _infer(mesh: Mesh, model: str) -> None:
    body = {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }
    reply = eventually_sync(  # the gateway's view follows the registry within moments
        lambda: httpx.post(f"http://{mesh.url}/v2/models/{model}/infer", json=body, timeout=5),
        lambda r: r.status_code == 200,
        15,
        every=0.1,
    )
    assert reply.status_code == 200, reply.text


async def test_targeted_loads_evict_the_least_recently_used_idle_model(
    aredis: aioredis.Redis, mesh: Mesh
) -> None:
    health_port = free_port()
    _start_worker(mesh, "p", health_port)
    mesh.start_scheduler()
    mesh.start_gateway(1)
    worker = await _worker_id(aredis, mesh)
    index = await control.read_index(aredis)
    assert set(index) == {"p", "a", "b", "c"}
    for name, entry in index.items():
        assert entry.backend == "onnxruntime" and entry.files_bytes > PAD, entry
        assert entry.not_loaded == (name != "p")
    budget = await aredis.hget(keys.service_info("worker", worker), "budget_bytes")
    assert budget is not None and int(budget) == 200 * 2**20

    # A message meant for another worker is left unanswered; the next one shows it was read.
    other = control.new_message(control.LOAD, "a", target="worker-elsewhere")
    await control.send(aredis, other)
    first = await _send(aredis, worker, control.LOAD, "a")
    assert first.status == control.ACK_OK and first.loaded == [1], first
    assert await aredis.llen(keys.control_acks(other.id)) == 0
    assert (await _send(aredis, worker, control.LOAD, "b")).loaded == [1]
    assert (await _send(aredis, worker, control.LOAD, "a")).message.startswith("already")

    _infer(mesh, "a")  # a is now more recently used than b, loaded after it
    held = await eventually(  # the next heartbeat publishes the execution's time
        lambda: _resident(aredis, worker),
        lambda h: {"a", "b"} <= set(h) and h["a"].last_used_ms > h["b"].last_used_ms,
        within=5.0,
    )
    assert held["a"].last_used_ms > held["b"].last_used_ms, held
    assert held["p"].pinned and not held["a"].pinned
    assert all(h.bytes >= PAD for h in held.values())
    measured = await on_demand.read_measured(aredis)
    assert measured["a"] >= PAD and measured["b"] >= PAD

    third = await _send(aredis, worker, control.LOAD, "c")
    assert third.status == control.ACK_OK and third.loaded == [1], third
    held = await eventually(lambda: _resident(aredis, worker), lambda h: "b" not in h)
    assert set(held) == {"p", "a", "c"}, held  # b evicted; p (pinned) and a (used) kept
    assert (await control.read_index(aredis))["c"].not_loaded  # placed, not expected

    dropped = await _send(aredis, worker, control.UNLOAD, "c")
    assert dropped.status == control.ACK_OK and dropped.unloaded == [1]
    refused = await _send(aredis, worker, control.UNLOAD, "p")
    assert refused.status == control.ACK_ERROR and "pinned" in refused.message

    async with httpx.AsyncClient() as client:
        scraped = (await client.get(f"http://127.0.0.1:{health_port}/metrics", timeout=5)).text
    samples = {
        f"{s.name}{sorted(s.labels.items())}": s.value
        for family in text_string_to_metric_families(scraped)
        for s in family.samples
    }
    for name, labels, value in (
        ("conch_model_loads_total", {"model": "p", "reason": "pinned"}, 1),
        ("conch_model_loads_total", {"model": "a", "reason": "demand"}, 1),
        ("conch_model_loads_total", {"model": "c", "reason": "demand"}, 1),
        ("conch_model_unloads_total", {"model": "b", "reason": "evicted"}, 1),
        ("conch_model_unloads_total", {"model": "c", "reason": "idle"}, 1),
        ("conch_worker_resident_models", {"backend": "onnxruntime"}, 2),
        ("conch_worker_model_memory_budget_bytes", {"backend": "onnxruntime"}, 200 * 2**20),
    ):
        assert samples.get(f"{name}{sorted(labels.items())}") == value, (name, labels)


async def test_no_room_when_the_budget_is_held_by_pinned_models(
    aredis: aioredis.Redis, mesh: Mesh
) -> None:
    _start_worker(mesh, "p,a,b")
    worker = await _worker_id(aredis, mesh)
    held = await eventually(lambda: _resident(aredis, worker), lambda h: len(h) == 3)
    assert all(h.pinned for h in held.values()), held
    answer = await _send(aredis, worker, control.LOAD, "c")
    assert answer.status == control.ACK_ERROR
    assert answer.message.startswith(f"no room on worker {worker} for model 'c'"), answer
    assert "pinned" in answer.message
    assert set(await _resident(aredis, worker)) == {"p", "a", "b"}  # nothing unloaded in vain

    # The repository API (untargeted) unloads a pinned model; its room is then the placer's.
    api = control.new_message(control.UNLOAD, "a")
    await control.publish(aredis, api)
    acks, _ = await control.collect(aredis, api.id, {worker}, 20.0)
    assert [(a.status, a.unloaded) for a in acks] == [(control.ACK_OK, [1])], acks
    placed = await _send(aredis, worker, control.LOAD, "c")
    assert placed.status == control.ACK_OK and placed.loaded == [1], placed
    held = await eventually(lambda: _resident(aredis, worker), lambda h: set(h) == {"p", "b", "c"})
    assert held["b"].pinned and not held["c"].pinned, held

"""Strict readiness of a gateway process and of its service (gateway.runtime.readiness)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.core.model_table import ModelTable
from gateway.runtime.readiness import Readiness
from gateway.runtime.status import NOT_READY, READY, STARTING, GatewayProcess, ProcessStatus
from shared.fleet.control import IndexEntry
from shared.fleet.expected_models import Expectations, LoadError
from shared.wire.errors import ConchError, ErrorCode


class _Redis:
    def __init__(self, up: bool = True):
        self.up = up

    async def ping(self) -> bool:
        if not self.up:
            raise ConnectionError("down")
        return True


def _table(not_ready: list[str], scanned: bool = True) -> ModelTable:
    table = ModelTable(_Redis())  # type: ignore[arg-type]
    table.expectations = Expectations(
        scanned=scanned,
        index={"a": IndexEntry(versions=[1, 3]), "b": IndexEntry(versions=[1])},
        load_errors={"c": LoadError(worker="w", message="ImportError: nope")},
    )
    table.expected = {"a", "b"}
    table.not_ready = not_ready
    table.loaded.set()
    return table


@pytest.fixture
def status() -> Any:
    shared = ProcessStatus.create(3)
    yield shared
    shared.close(remove=True)


async def test_strict_readiness_waits_for_every_expected_model() -> None:
    table = _table(["a"])
    readiness = Readiness(table, strict=True, process=None)
    assert await readiness.check(_Redis()) == "not every model is ready: waiting for 'a'"
    table.not_ready = []
    assert await readiness.check(_Redis()) is None
    assert "Redis is unreachable" in (await readiness.check(_Redis(up=False)) or "")
    unscanned = Readiness(_table([], scanned=False), strict=True, process=None)
    assert await unscanned.check(_Redis()) == "no worker has read the model repository yet"


async def test_not_strict_is_the_old_meaning() -> None:
    readiness = Readiness(_table(["a"], scanned=False), strict=False, process=None)
    assert await readiness.check(_Redis()) is None


async def test_a_sibling_that_accepts_without_every_model_holds_the_service_back(
    status: ProcessStatus,
) -> None:
    mine, sibling = GatewayProcess(0, status), GatewayProcess(1, status)
    table = _table([])
    readiness = Readiness(table, strict=True, process=mine)
    readiness.start_accepting()
    assert status.all() == [READY, STARTING, STARTING]  # a sibling not accepting yet: no matter
    assert await readiness.check(_Redis()) is None
    sibling.set(NOT_READY)
    assert await readiness.check(_Redis()) == (
        "another process of this gateway service is not ready yet"
    )
    sibling.set(READY)
    assert await readiness.check(_Redis()) is None
    table.not_ready = ["b"]
    for listener in table._listeners:
        listener()  # a refresh
    assert status.get(0) == NOT_READY
    readiness.stop_accepting()
    assert status.get(0) == STARTING


async def test_a_late_process_accepts_only_once_its_table_holds_every_model(
    status: ProcessStatus,
) -> None:
    GatewayProcess(0, status).set(READY)
    table = _table(["a"])
    readiness = Readiness(table, strict=True, process=GatewayProcess(2, status))

    async def refresh_later() -> None:
        await asyncio.sleep(0.3)
        table.not_ready = []

    started = time.monotonic()
    await asyncio.gather(readiness.wait_to_accept(timeout_s=30), refresh_later())
    assert time.monotonic() - started >= 0.3
    # Without a ready sibling (the service's first start) it accepts at once, to say "not ready".
    alone = ProcessStatus.create(2)
    first = Readiness(_table(["a"]), strict=True, process=GatewayProcess(1, alone))
    await asyncio.wait_for(first.wait_to_accept(timeout_s=30), 1)
    alone.close(remove=True)


def test_a_loading_model_is_not_ready_never_unknown() -> None:
    table = _table(["a", "b"])
    with pytest.raises(ConchError) as loading:
        table.config("a")
    assert loading.value.code is ErrorCode.UNAVAILABLE
    assert loading.value.message == "Request for unknown model: 'a' version 3 is not at ready state"
    with pytest.raises(ConchError) as named:
        table.resolve_version("b", "1")
    assert named.value.code is ErrorCode.UNAVAILABLE
    with pytest.raises(ConchError) as failed:
        table.config("c")
    assert failed.value.code is ErrorCode.NOT_FOUND
    assert "failed to load: ImportError: nope" in failed.value.message
    with pytest.raises(ConchError) as unknown:
        table.config("z")
    assert unknown.value.code is ErrorCode.NOT_FOUND
    assert unknown.value.message == "Request for unknown model: 'z' is not found"


async def test_a_late_process_asked_to_stop_stops_waiting_for_its_table(
    status: ProcessStatus,
) -> None:
    """uvicorn holds a SIGTERM until start-up ends: a process whose table never fills (Redis
    restarted under it) waited out its whole bound and was killed by its supervisor."""
    GatewayProcess(0, status).set(READY)
    late = GatewayProcess(2, status)
    readiness = Readiness(_table(["a"]), strict=True, process=late)  # "a" never becomes ready

    async def stop_later() -> None:
        await asyncio.sleep(0.2)
        late.stopping.set()

    started = time.monotonic()
    await asyncio.wait_for(asyncio.gather(readiness.wait_to_accept(timeout_s=30), stop_later()), 5)
    assert time.monotonic() - started < 1.0

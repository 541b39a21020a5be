"""The backlog a scheduler publishes for the on_demand placer, and the service wiring."""

from __future__ import annotations

import json
from typing import Any

from scheduler.placement import fleet_view
from scheduler.queueing.version_queue import VersionQueue
from scheduler.service import SchedulerService
from scheduler.settings import SchedulerSettings


def _queue(waiting: int) -> VersionQueue:
    queue = VersionQueue.__new__(VersionQueue)  # only its length is read
    queue._pending = list(range(waiting))  # type: ignore[assignment]
    return queue


def test_backlog_sums_versions_per_model_and_skips_empty_and_other_queues() -> None:
    queues: dict[tuple[str, int], Any] = {
        ("a", 1): _queue(3),
        ("a", 2): _queue(4),
        ("b", 1): _queue(0),
        ("ens", 1): object(),  # an ensemble's runner: its steps are not this model's backlog
    }
    assert json.loads(fleet_view.backlog_info(queues)) == {"a": 7}


def test_service_runs_a_placer_and_publishes_backlog_only_on_demand() -> None:
    plain = SchedulerService(SchedulerSettings())
    assert plain.placer is None and "backlog" not in plain._heartbeat_info()
    service = SchedulerService(SchedulerSettings(model_control_mode="ON_DEMAND"))
    assert service.placer is not None
    service.queues[("m", 1)] = _queue(2)
    assert json.loads(service._heartbeat_info()["backlog"]) == {"m": 2}

"""How many CPUs this process may use, and how many gateway processes that calls for.

The count follows what the process may actually run on: its CPU affinity (``taskset``, cpusets)
and a cgroup CPU quota (a container's ``--cpus``, a Kubernetes CPU limit), not the host's total.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from shared.wire.errors import invalid

# The gateways are the mesh's bottleneck until Redis or the scheduler is (the journal's big-machine
# curve on 16 cores: 1 -> 3,669, 2 -> 8,346, 4 -> 14,550, 8 -> 16,029 req/s), and the rest of the
# mesh (scheduler, workers, Redis, Envoy) needs CPUs too: one process per two CPUs, at least 2 (the
# old default, no slower on 2 CPUs), at most 8 (beyond, Redis and the scheduler limit).
MIN_GATEWAYS = 2
MAX_GATEWAYS = 8


def available_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may run on: affinity, capped by a cgroup quota where one is set."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cgroup_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None: no limit."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def auto_gateways(cpus: int) -> int:
    """Gateway processes for ``cpus`` CPUs (pure): one per two, within [2, 8]."""
    return max(MIN_GATEWAYS, min(MAX_GATEWAYS, cpus // 2))


def gateway_processes(setting: str | int) -> int:
    """A ``processes`` setting ("auto" or a positive number) as a count."""
    text = str(setting).strip().lower()
    if text == "auto":
        return auto_gateways(available_cpus())
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise invalid(f"gateway processes must be 'auto' or a positive number, got {setting!r}")
    return count

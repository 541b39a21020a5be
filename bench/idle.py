"""What an idle mesh costs: CPU and wake-ups of every one of its processes, no traffic.

A wake-up is a context switch of any thread of the process (voluntary: it slept and was woken;
involuntary: it was preempted), read from ``/proc/<pid>/task/<tid>/status``: a periodic loop
that wakes a process shows up here even when it does no work, and on a VM that freezes and
throttles every wake-up is latency for the requests that do come.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import psutil


def _switches(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue  # the thread ended
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                total += int(line.split()[1])
    return total


def _sample(processes: list[psutil.Process]) -> dict[int, tuple[float, int]]:
    found: dict[int, tuple[float, int]] = {}
    for process in processes:
        try:
            cpu = process.cpu_times()
            found[process.pid] = (cpu.user + cpu.system, _switches(process.pid))
        except (psutil.Error, OSError):
            continue
    return found


@dataclass(frozen=True)
class IdleCost:
    seconds: float
    cores: float
    wakeups_per_s: float
    # label -> (cores, wake-ups/s), summed over the processes of that label
    by_label: dict[str, tuple[float, float]]

    def line(self) -> str:
        parts = ", ".join(
            f"{label} {cores:.4f} cores {wakes:.0f}/s"
            for label, (cores, wakes) in sorted(self.by_label.items(), key=lambda kv: -kv[1][1])
        )
        return (
            f"idle mesh over {self.seconds:.0f} s: {self.cores:.4f} cores, "
            f"{self.wakeups_per_s:.0f} wake-ups/s ({parts})"
        )

    def row(self) -> dict[str, object]:
        """The JSON line ``conch bench`` appends beside its cells."""
        return {
            "server": "conch",
            "cell": "idle",
            "seconds": round(self.seconds, 1),
            "cores": round(self.cores, 4),
            "wakeups_per_s": round(self.wakeups_per_s, 1),
            "by_label": {k: [round(c, 4), round(w, 1)] for k, (c, w) in self.by_label.items()},
        }


def measure(processes: list[psutil.Process], label: object, seconds: float) -> IdleCost:
    """``label(process)`` names a process's role (gateway, scheduler, worker, redis...)."""
    before = _sample(processes)
    started = time.monotonic()
    time.sleep(seconds)
    after = _sample(processes)
    wall = time.monotonic() - started
    by_label: dict[str, tuple[float, float]] = {}
    for process in processes:
        if process.pid not in before or process.pid not in after:
            continue
        cpu = (after[process.pid][0] - before[process.pid][0]) / wall
        wakes = (after[process.pid][1] - before[process.pid][1]) / wall
        name = str(label(process))  # type: ignore[operator]  # label: object, a callable
        old = by_label.get(name, (0.0, 0.0))
        by_label[name] = (old[0] + cpu, old[1] + wakes)
    return IdleCost(
        seconds=wall,
        cores=sum(c for c, _ in by_label.values()),
        wakeups_per_s=sum(w for _, w in by_label.values()),
        by_label=by_label,
    )

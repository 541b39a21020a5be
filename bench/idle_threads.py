"""Who wakes an idle mesh, thread by thread: ``python -m bench.idle_threads PID [SECONDS]``.

Samples every thread of PID's process tree (``conch up`` and everything under it) from
``/proc/PID/task/TID/status`` and ``stat``, twice, SECONDS apart (default 20), and prints each
process's wake-ups per second with its threads (by name), split into voluntary (it slept and was
woken: a timer, a reply, a signal) and involuntary (it was preempted: the machine's load, not the
mesh's doing), and the whole tree's total and cores. ``conch bench --idle-seconds`` gives the
per-process totals; this says which thread of a process it is (docs/performance.md, "What wakes
each process now, and why").
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ThreadSample:
    name: str
    voluntary: int
    involuntary: int
    cpu_ticks: int


def tree(root: int) -> list[int]:
    """``root`` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def sample(pids: list[int]) -> dict[tuple[int, int], ThreadSample]:
    """(pid, tid) -> its counters now; threads that ended meanwhile are skipped."""
    found: dict[tuple[int, int], ThreadSample] = {}
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                status = (task / "status").read_text()
                stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            found[(pid, int(task.name))] = ThreadSample(
                name=fields.get("Name", "").strip(),
                voluntary=int(fields.get("voluntary_ctxt_switches", "0")),
                involuntary=int(fields.get("nonvoluntary_ctxt_switches", "0")),
                cpu_ticks=int(stat[11]) + int(stat[12]),  # utime, stime
            )
    return found


def report(root: int, seconds: float) -> str:
    pids = tree(root)
    before = sample(pids)
    started = time.monotonic()
    time.sleep(seconds)
    after = sample(pids)
    wall = time.monotonic() - started
    hz = os.sysconf("SC_CLK_TCK")
    per_process: dict[int, list[tuple[float, float, str, int]]] = {}
    total = involuntary_total = cpu = 0.0
    for key, now in after.items():
        then = before.get(key)
        if then is None:
            continue
        voluntary = (now.voluntary - then.voluntary) / wall
        involuntary = (now.involuntary - then.involuntary) / wall
        total += voluntary + involuntary
        involuntary_total += involuntary
        cpu += (now.cpu_ticks - then.cpu_ticks) / hz / wall
        per_process.setdefault(key[0], []).append((voluntary, involuntary, now.name, key[1]))
    lines = []
    for pid, threads in sorted(
        per_process.items(), key=lambda kv: -sum(v + i for v, i, *_ in kv[1])
    ):
        lines.append(f"{pid:>8} {sum(v + i for v, i, *_ in threads):6.2f}/s  {_command(pid)}")
        for voluntary, involuntary, name, tid in sorted(threads, key=lambda t: -(t[0] + t[1])):
            if voluntary + involuntary >= 0.05:
                lines.append(
                    f"{tid:>16} {name:<16} {voluntary + involuntary:6.2f}/s"
                    f"  (voluntary {voluntary:.2f}, involuntary {involuntary:.2f})"
                )
    lines.append(
        f"total {total:.1f} wake-ups/s (involuntary {involuntary_total:.1f}), {cpu:.4f} cores "
        f"over {wall:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return "\n".join(lines)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
    except OSError:
        return "?"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(report(int(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 20.0))

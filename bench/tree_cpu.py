"""CPU seconds (user + system) of a process and all its descendants, from ``/proc``.

``bench/alternate.sh`` reads it before and after each window of one side, so that each window
reports the server's own CPU per request: on a machine shared with other work, a figure that
the neighbours' load does not blur the way requests/s is blurred.

    python bench/tree_cpu.py PID   ->  "total gateway=.. scheduler=.. worker=.. redis=.." seconds
"""

from __future__ import annotations

import os
import sys


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first); None when the
    process is gone. The name is in parentheses and may hold spaces: split after the last one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat_fields(name)) is not None:
            tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


ROLES = ("gateway", "scheduler", "worker", "redis")


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "-m gateway" in command:
        return "gateway"
    if "-m scheduler" in command:
        return "scheduler"
    if "-m workers" in command or "workers.python" in command:
        return "worker"
    if "redis-server" in command or "valkey" in command:
        return "redis"
    return "other"


def tree_cpu_seconds(root: int) -> dict[str, float]:
    """Seconds by role (gateway, scheduler, worker, redis, other) and in all ("total")."""
    tree, todo = _children(), [root]
    ticks: dict[str, int] = {}
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        fields = _stat_fields(pid)
        if fields is None:
            continue
        role = _role(pid)
        ticks[role] = ticks.get(role, 0) + int(fields[11]) + int(fields[12])  # utime, stime
    hz = os.sysconf("SC_CLK_TCK")
    seconds = {role: n / hz for role, n in ticks.items()}
    seconds["total"] = sum(ticks.values()) / hz
    return seconds


if __name__ == "__main__":
    found = tree_cpu_seconds(int(sys.argv[1]))
    print(" ".join(f"{found.get(role, 0.0):.3f}" for role in ("total", *ROLES)))

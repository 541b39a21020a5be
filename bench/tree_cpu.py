"""CPU seconds (user + system) of a process and all its descendants, from ``/proc``.

``bench/alternate.sh`` reads it before and after each window of one side, so that each window
reports the server's own CPU per request: on a machine shared with other work, a figure that
the neighbours' load does not blur the way requests/s is blurred.

    python -m bench.tree_cpu PID   ->  prints the seconds
"""

from __future__ import annotations

import os
import sys


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def tree_cpu_seconds(root: int) -> float:
    tree, ticks, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(tree.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    print(f"{tree_cpu_seconds(int(sys.argv[1])):.3f}")

"""One chaos run: steady load, a fault in the middle, then the verdict.

The figures of every run are appended as one JSON line to ``$CONCH_CHAOS_REPORT`` when that is
set (``make chaos`` sets it; ``python -m tests.chaos.report`` turns the file into the tables of
``docs/reliability.md``).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable

from tests.chaos.chaos_mesh import GATEWAYS, ChaosMesh
from tests.chaos.faults import Struck
from tests.chaos.ledger import Ledger
from tests.chaos.load import Load, Mix
from tests.chaos.verdict import (
    Verdict,
    judge,
    model_streams,
    orphans_after_settling,
    stream_figures,
)

# Unique request ids for the whole session (the ledger is shared by every run on a mesh).
NUMBERS = itertools.count(int(time.time()) % 100_000 * 1_000_000)


def heal(mesh: ChaosMesh) -> None:
    """Before a run: every service up and the mesh answering, whatever the last run left."""
    for name in mesh.dead_services():
        mesh.restart(name)
    try:
        mesh.wait_serving(45)
    except TimeoutError:  # a gateway wedged by the last fault: replace them
        for name in GATEWAYS:
            mesh.kill(name)
            mesh.restart(name)
        mesh.wait_serving(60)


def run_fault(
    mesh: ChaosMesh,
    name: str,
    fault: Callable[[ChaosMesh], Struck],
    rate: float,
    rounds: int = 1,
    warm_s: float = 2.0,
    after_s: float = 4.0,
) -> Verdict:
    """``rounds`` strikes of ``fault`` under one steady load, ``after_s`` apart."""
    heal(mesh)
    inspect = mesh.inspect()
    streams_before = stream_figures(inspect)
    load = Load(mesh.url, rate, NUMBERS, Mix()).start()
    began = time.monotonic()
    struck: list[Struck] = []
    try:
        time.sleep(warm_s)
        for _ in range(rounds):
            struck.append(fault(mesh))
            time.sleep(after_s)
    finally:
        load.stop()
    seconds = time.monotonic() - began
    orphans = orphans_after_settling(inspect, streams_before)
    left = {k: v for k, v in model_streams(inspect).items() if any(v)}
    inspect.close()
    verdict = judge(
        name,
        load.outcomes,
        Ledger.read(mesh.record_dir),
        orphans,
        [s.cut_at for s in struck if s.cut_at is not None],
        seconds,
        rate,
        note="; ".join(sorted({s.note for s in struck if s.note}))
        + (f"; {rounds} strikes" if rounds > 1 else ""),
    )
    if any(orphans.values()):
        verdict.examples["streams left"] = [
            f"{k}: {n} entries, {p} pending" for k, (n, p) in left.items()
        ]
    record(verdict, kind="fault")
    return verdict


def record(verdict: Verdict, kind: str, **extra: object) -> None:
    path = os.environ.get("CONCH_CHAOS_REPORT")
    print(verdict.summary())
    if path:
        with open(path, "a") as report:
            report.write(json.dumps({"kind": kind, **verdict.as_json(), **extra}) + "\n")

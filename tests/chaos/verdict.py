"""What a chaos run is judged by, from the clients' outcomes, the model's ledger and Redis.

lost               no answer, or a deadline error, for a request the mesh had
executed twice     completed executions of one request id > 1 (the model's record)
wrong answers      a 200 whose output is not 3 * ID + 1 for its own ID
refused            503/429 at once while capacity was alive (it always is here: a fault
                   takes down at most one of each kind, and a restart follows)
cut                connection cut without an answer; allowed only for requests in flight
                   on a gateway at the moment the fault killed it
errors             any other answer
answered, unrun    a 200 without a completed execution in the ledger
orphans            entries left in the model's streams (queued, pending, dead-lettered)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from tests.chaos.chaos_mesh import MODEL
from tests.chaos.ledger import Ledger
from tests.chaos.load import Outcome, tally
from tests.waiting import eventually_sync


@dataclass
class Verdict:
    name: str
    requests: int
    outcomes: dict[str, int]
    executed_twice: int
    answered_unrun: int
    cut_outside_fault: int
    interrupted_executions: int
    orphans: dict[str, int]
    seconds: float
    rate: float
    note: str = ""
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failures(self) -> dict[str, int]:
        """Every figure that must be zero, with its value."""
        figures = {
            "lost": self.outcomes["lost"],
            "executed twice": self.executed_twice,
            "wrong answers": self.outcomes["wrong"],
            "refused": self.outcomes["refused"],
            "errors": self.outcomes["error"],
            "cut outside the fault": self.cut_outside_fault,
            "answered but not executed": self.answered_unrun,
            **{f"orphaned {k}": v for k, v in self.orphans.items()},
        }
        return {k: v for k, v in figures.items() if v}

    def summary(self) -> str:
        o = self.outcomes
        return (
            f"{self.name}: {self.requests} requests at {self.rate:.0f}/s in {self.seconds:.0f} s;"
            f" ok {o['ok']}, cut {o['cut']} (outside the fault {self.cut_outside_fault}),"
            f" lost {o['lost']}, executed twice {self.executed_twice}, wrong {o['wrong']},"
            f" refused {o['refused']}, errors {o['error']}, orphans {sum(self.orphans.values())},"
            f" executions interrupted by the fault {self.interrupted_executions}"
            + (f"; {self.note}" if self.note else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "failures": self.failures}


# A request sent this soon after a gateway was killed may still go out on one of Envoy's pooled
# connections to it (Envoy learns of the closed connection only when its event loop runs, and a
# process on these VMs can be frozen for up to a second): the kill cut it, as the edge tests allow
# (tests/deploy/test_envoy_edge.py, CUT_WINDOW_S).
CUT_WINDOW_S = 1.0


def judge(
    name: str,
    outcomes: list[Outcome],
    ledger: Ledger,
    orphans: dict[str, int],
    cut_moments: list[float],
    seconds: float,
    rate: float,
    note: str = "",
) -> Verdict:
    numbers = {o.number for o in outcomes}
    twice = ledger.executed_twice(numbers)
    unrun = [o for o in outcomes if o.kind == "ok" and ledger.executions(o.number) == 0]
    stray_cuts = [
        o
        for o in outcomes
        if o.kind == "cut"
        and not any(o.started - CUT_WINDOW_S <= at <= o.ended for at in cut_moments)
    ]
    examples: dict[str, list[str]] = {}
    for kind in ("lost", "wrong", "refused", "error", "cut"):
        picked = [
            f"{o.number}: {o.status} {o.detail[:160]}{_after_fault(o, cut_moments)}"
            for o in outcomes
            if o.kind == kind
        ]
        if picked:
            examples[kind] = picked[:5]
    if twice:
        examples["executed twice"] = [f"{n} x{ledger.executions(n)}" for n in twice[:5]]
    return Verdict(
        name=name,
        requests=len(outcomes),
        outcomes=tally(outcomes),
        executed_twice=len(twice),
        answered_unrun=len(unrun),
        cut_outside_fault=len(stray_cuts),
        interrupted_executions=ledger.interrupted(numbers),
        orphans=orphans,
        seconds=seconds,
        rate=rate,
        note=note,
        examples=examples,
    )


def model_streams(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Every stream of the model: name -> (entries, pending in its consumer groups)."""
    found: dict[str, tuple[int, int]] = {}
    for raw in client.scan_iter(match=f"conch:m:{{{MODEL}}}:*", count=1000):
        key = raw.decode()
        if client.type(key) != b"stream":
            continue
        pending = 0
        for group in client.xinfo_groups(key):
            pending += int(group["pending"])
        found[key] = (client.xlen(key), pending)
    return found


def stream_figures(client: redis.Redis) -> dict[str, int]:
    streams = model_streams(client)
    return {
        "queued": sum(n for k, (n, _) in streams.items() if not k.endswith(":dead")),
        "pending": sum(p for _, (_, p) in streams.items()),
        "dead-lettered": sum(n for k, (n, _) in streams.items() if k.endswith(":dead")),
    }


def orphans_after_settling(
    client: redis.Redis, before: dict[str, int], timeout_s: float = 60.0
) -> dict[str, int]:
    """Wait until the model's streams hold no more queued or pending entries than before the
    run (zero, unless an earlier run left some), or report what stays: queued entries, pending
    entries and dead letters this run added (none may remain once its traffic ended)."""

    def added() -> dict[str, int]:
        now = stream_figures(client)
        return {k: max(0, now[k] - before.get(k, 0)) for k in now}

    return eventually_sync(
        added, lambda a: a["queued"] == 0 and a["pending"] == 0, timeout_s, every=0.5
    )


def _after_fault(outcome: Outcome, cut_moments: list[float]) -> str:
    """Where a failure sits against the faults: what a reader needs to tell cause from chance."""
    before = [at for at in cut_moments if at <= outcome.ended]
    if not before:
        return " (before any fault)"
    return f" (sent {outcome.started - max(before):+.2f} s after the last fault)"

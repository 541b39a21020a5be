"""The soak: a long run of uniquely identified requests at mixed priorities and tenants, with
the faults of ``faults.py`` striking at random moments, while every process's RSS and Redis's
keys are sampled.

Judged as a fault run is (``verdict.py``), and besides: the RSS of every process that lived
through the run grows less than 10 % from the end of the warm-up (the first fifth of the run)
to the end of the traffic, and Redis holds no more keys once the traffic has stopped (and the
mesh has had its replies' time to live to expire them) than before it started.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx

from shared.wire.keys import service_registry
from tests.chaos.chaos_mesh import ADMIN_TOKEN, ChaosMesh
from tests.chaos.faults import FAULTS
from tests.chaos.ledger import Ledger
from tests.chaos.load import Load, Mix
from tests.chaos.scenario import NUMBERS, heal, record
from tests.chaos.verdict import (
    Verdict,
    judge,
    model_streams,
    orphans_after_settling,
    stream_figures,
)
from tests.waiting import eventually_sync

TENANTS = {"gold": 1, "bronze": 3}  # tenant -> its priority level
RSS_GROWTH_LIMIT = 0.10
WARM_UP_SHARE = 0.2
# Reply streams of a killed gateway expire 60 s after their last reply (shared/fleet/publish.py).
KEYS_SETTLE_S = 75.0


@dataclass
class Sampler:
    """RSS of every mesh process (by label and pid) and Redis's key count, every ``every_s``."""

    mesh: ChaosMesh
    every_s: float = 5.0
    rss: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            now = time.monotonic()
            for label, process in self.mesh.process_tree().items():
                try:
                    rss = process.memory_info().rss
                except Exception:
                    continue
                self.rss.setdefault((label, process.pid), []).append((now, rss))

    def growth(self, warm_end: float, began: float, ended: float) -> dict[str, dict[str, float]]:
        """Per process alive from the warm-up's end to the end: RSS then and at the end."""
        figures: dict[str, dict[str, float]] = {}
        for (label, pid), samples in sorted(self.rss.items()):
            first, last = samples[0][0], samples[-1][0]
            own_warm = max(warm_end, first + (warm_end - began))
            if first > warm_end or last < ended - 2 * self.every_s or own_warm >= ended:
                continue  # started late (restarted by a fault) or died before the end
            warm = [r for t, r in samples if own_warm <= t <= own_warm + 3 * self.every_s]
            end = [r for _, r in samples[-3:]]
            if not warm:
                continue
            before, after = statistics.median(warm), statistics.median(end)
            figures[f"{label} (pid {pid})"] = {
                "warm_mib": round(before / 2**20, 1),
                "end_mib": round(after / 2**20, 1),
                "growth": round(after / before - 1, 4),
            }
        return figures


def create_tenants(mesh: ChaosMesh) -> dict[str, str]:
    """Two tenants at their own priority levels; returns tenant -> API key."""
    keys: dict[str, str] = {}
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for name, priority in TENANTS.items():
        key = f"soak-{name}-api-key-0123456789abcdef"
        response = httpx.put(
            f"{mesh.url}/v2/admin/tenants/{name}",
            json={"api_keys": [key], "priority": priority},
            headers=admin,
            timeout=10,
        )
        response.raise_for_status()
        keys[name] = key
    time.sleep(1.5)  # every gateway re-reads tenants within a second
    return keys


def soak_mix(keys: dict[str, str]) -> Mix:
    callers: list[tuple[str | None, int | None]] = [(key, None) for key in keys.values()]
    callers += [(None, 1), (None, 2), (None, 3), (None, None)]
    return Mix(callers)


def redis_keys(mesh: ChaosMesh) -> set[str]:
    client = mesh.inspect()
    try:
        return {k.decode() for k in client.scan_iter(count=1000)}
    finally:
        client.close()


def live_service_ids(mesh: ChaosMesh) -> set[str]:
    """Ids of the services heartbeating now: a process a fault restarted runs under a new id,
    and its own keys (reply stream, service details) are its, not left over."""
    client = mesh.inspect()
    try:
        now_ms = int(time.time() * 1000)
        found: set[str] = set()
        for kind in ("gateway", "scheduler", "worker"):
            members = client.zrangebyscore(service_registry(kind), now_ms, "+inf")
            found |= {m.decode() for m in members}
        return found
    finally:
        client.close()


def keys_after_traffic(mesh: ChaosMesh, baseline: set[str]) -> tuple[int, list[str]]:
    """Wait (bounded) for the keys a finished run may leave to be deleted or given their
    expiry; returns the key count then and the keys that were not there before the run, belong
    to no live service and would outlive ``KEYS_SETTLE_S`` (no TTL, or a longer one).

    A key that expires within that bound is not a leak: Redis deletes it on time whatever
    happens to the mesh, and a request's ``admitted`` mark is meant to last until its
    deadline (waiting for those to go cost the short soak 30 s)."""

    def count_and_lasting() -> tuple[int, list[str]]:
        now = redis_keys(mesh)
        live = live_service_ids(mesh)
        extra = sorted(k for k in now - baseline if not any(i in k for i in live))
        return len(now), _outliving(mesh, extra, KEYS_SETTLE_S)

    return eventually_sync(count_and_lasting, lambda found: not found[1], KEYS_SETTLE_S, every=2)


def _outliving(mesh: ChaosMesh, names: list[str], bound_s: float) -> list[str]:
    """The keys of ``names`` that have no expiry or expire later than ``bound_s`` from now."""
    if not names:
        return []
    client = mesh.inspect()
    try:
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.pttl(name)
        ttls = pipe.execute()
    finally:
        client.close()
    # -2: deleted meanwhile; -1: no expiry.
    return [n for n, ttl in zip(names, ttls, strict=True) if ttl == -1 or ttl > bound_s * 1000]


@dataclass
class SoakReport:
    verdict: Verdict
    rss: dict[str, dict[str, float]]
    keys_before: int
    keys_after: int
    extra_keys: list[str]
    faults: list[tuple[float, str]]

    @property
    def rss_over_limit(self) -> dict[str, dict[str, float]]:
        return {k: v for k, v in self.rss.items() if v["growth"] >= RSS_GROWTH_LIMIT}


def run_soak(mesh: ChaosMesh, total: int, rate: float, fault_gap_s: float, seed: int) -> SoakReport:
    rng = random.Random(seed)
    heal(mesh)
    keys = create_tenants(mesh)
    mix = soak_mix(keys)
    # One request per caller first: every tenant's keys (rate buckets...) exist before the
    # baseline is taken, so only growth counts.
    warm = Load(mesh.url, 20, NUMBERS, mix, max_requests=2 * len(mix.callers), seed=seed)
    warm.start().stop()
    time.sleep(1)
    baseline = redis_keys(mesh)
    inspect = mesh.inspect()
    streams_before = stream_figures(inspect)
    sampler = Sampler(mesh).start()
    load = Load(mesh.url, rate, NUMBERS, mix, max_requests=total, seed=seed).start()
    began = time.monotonic()
    duration = total / rate
    warm_end = began + WARM_UP_SHARE * duration
    struck: list[tuple[float, str]] = []
    cut_moments: list[float] = []
    names = list(FAULTS)
    try:
        next_fault = began + rng.uniform(0.5, 1.0) * fault_gap_s
        while not load.finished.is_set():
            if time.monotonic() >= next_fault and time.monotonic() < began + duration - 10:
                name = rng.choice(names)
                heal(mesh)
                outcome = FAULTS[name](mesh)
                struck.append((round(outcome.started - began, 1), name))
                if outcome.cut_at is not None:
                    cut_moments.append(outcome.cut_at)
                next_fault = time.monotonic() + rng.uniform(0.5, 1.5) * fault_gap_s
            time.sleep(0.2)
    finally:
        load.stop()
        ended = time.monotonic()
        sampler.stop()
    orphans = orphans_after_settling(inspect, streams_before)
    left = {k: v for k, v in model_streams(inspect).items() if any(v)}
    inspect.close()
    keys_after, extra = keys_after_traffic(mesh, baseline)
    verdict = judge(
        "soak",
        load.outcomes,
        Ledger.read(mesh.record_dir),
        orphans,
        cut_moments,
        ended - began,
        rate,
        note=f"{len(struck)} faults at random moments",
    )
    if any(orphans.values()):
        verdict.examples["streams left"] = [
            f"{k}: {n} entries, {p} pending" for k, (n, p) in left.items()
        ]
    report = SoakReport(
        verdict, sampler.growth(warm_end, began, ended), len(baseline), keys_after, extra, struck
    )
    record(
        verdict,
        kind="soak",
        rss=report.rss,
        keys_before=report.keys_before,
        keys_after=report.keys_after,
        extra_keys=extra[:20],
        faults=struck,
    )
    return report

"""One mode's run: start the mesh, drive the mix, watch, stop, and reduce it all to figures.

The client processes are forked before the watch thread starts (a fork copies only the thread
that calls it). The result keeps the raw numbers: every request (model rank, send time from the
run's start, latency, outcome, cold), the memory samples, and the settings that produced them.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.many_models import mesh
from bench.many_models.client import LoadPlan, LoadRun
from bench.many_models.report import summarize
from bench.many_models.timeline import classify
from conch.ports import free_port


@dataclass(frozen=True)
class RunSettings:
    mode: str
    repo: Path
    models: int  # in the repository
    hot: int  # warm: pre-loaded, and the mix's ranks
    pinned: int  # on_demand: --load-model of the hottest
    workers: int
    budget: str
    concurrency: int
    processes: int
    duration_s: float
    seed: int
    s: float
    request_timeout_s: float
    sample_every_s: float
    watch_index: bool
    up_args: tuple[str, ...]
    log_dir: Path


def label(settings: RunSettings) -> str:
    if settings.mode == "warm":
        return f"warm: {settings.hot} hottest pre-loaded"
    return f"on_demand: {settings.models:,} models, budget {settings.budget}/worker"


def run_mode(settings: RunSettings) -> dict[str, Any]:
    warm = settings.mode == "warm"
    plan = mesh.MeshPlan(
        mode=settings.mode,
        repo=settings.repo,
        workers=settings.workers,
        pinned=settings.hot if warm else settings.pinned,
        budget=settings.budget,
        http_port=free_port(),
        grpc_port=free_port(),
        admin_token=secrets.token_hex(16),
        up_args=settings.up_args,
    )
    url = f"http://127.0.0.1:{plan.http_port}"
    log = settings.log_dir / f"many_models-{settings.mode}-conch-up.log"
    print(f"{settings.mode}: conch up (log: {log})", flush=True)
    started = time.monotonic()
    process = mesh.start(plan, log)
    try:
        try:
            mesh.wait_ready(process, url, plan, settings.models, timeout_s=900)
        except SystemExit as failed:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise SystemExit(f"{failed} (log {log}: {' | '.join(tail)})") from None
        ready_s = time.monotonic() - started
        print(f"{settings.mode}: ready in {ready_s:.1f} s; load for {settings.duration_s:.0f} s")
        time.sleep(2.0)  # start-up's last writes settle before the idle memory is read
        idle_rss = sum(p.memory_info().rss for p in mesh.worker_processes(process.pid))
        loads_before = mesh.server_loads(process.pid)
        load = LoadPlan(
            url=url,
            models=settings.hot if warm else settings.models,
            concurrency=settings.concurrency,
            processes=settings.processes,
            duration_s=settings.duration_s,
            seed=settings.seed,
            s=settings.s,
            request_timeout_s=settings.request_timeout_s,
        )
        begin = time.monotonic() + 1.0
        clients = LoadRun(load, begin)
        clients.start()
        watch = mesh.Watch(
            process.pid, url, plan.admin_token, settings.sample_every_s, settings.watch_index
        )
        watch.start()
        try:
            records = clients.join()
        finally:
            watch.stop()
        loads_after = mesh.server_loads(process.pid)
    finally:
        mesh.stop(process)
    ok = (records.status >= 200) & (records.status < 300)
    residency = classify(
        records.models, records.sent, records.latency, ok, range(plan.pinned), watch.samples
    )
    ends = records.sent + records.latency
    elapsed = float(ends.max() - begin) if len(ends) else settings.duration_s
    summary = summarize(records.models, records.latency, records.status, residency.cold,
                        elapsed, residency.loads, residency.evictions, watch.peak_rss)  # fmt: skip
    summary["server_loads"] = (
        loads_after - loads_before if loads_after is not None and loads_before is not None else None
    )
    summary["idle_worker_rss_mib"] = round(idle_rss / 2**20, 1)
    summary["client_cpu_cores"] = round(records.cpu_s / elapsed, 2) if elapsed > 0 else None
    summary["ready_s"] = round(ready_s, 1)
    summary["index_samples"] = len(watch.samples)
    summary["index_errors"] = watch.index_errors
    order = np.argsort(records.sent, kind="stable")
    return {
        "label": label(settings),
        "settings": asdict(settings) | {"repo": str(settings.repo), "log_dir": str(log.parent)},
        "conch_up": [a if a != plan.admin_token else "TOKEN" for a in mesh.up_argv(plan)],
        "summary": summary,
        "memory": [[round(t - begin, 3), rss] for t, rss in watch.memory],
        "requests": {
            "model": records.models[order].tolist(),
            "sent_s": np.round(records.sent[order] - begin, 6).tolist(),
            "latency_ms": np.round(records.latency[order] * 1000, 3).tolist(),
            "status": records.status[order].tolist(),
            "cold": residency.cold[order].tolist(),
        },
    }

#!/usr/bin/env python3
"""Measure the policy figures of docs/policy.md on a mesh of real processes:

1. the version split of 2,000 requests without a version, weights {"1": 80, "3": 20}, across
   three gateway processes;
2. the admitted rate of a tenant limited to 50 requests/s (burst 10) driven at ~200 requests/s
   for 5 s across the gateways, and what the rest got;
3. p50/p99 latency by priority under saturation: an open-loop load of two priorities, half and
   half, above what the worker serves.

    .venv/bin/python scripts/policy_figures.py [--requests 2000] [--rate-seconds 5]

It starts its own private Redis, scheduler, workers (ONNX Runtime and Python) and a gateway of
three processes on a free port, writes the example repository into a temporary directory, and
stops everything at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conch.private_redis import PrivateRedis  # noqa: E402
from tests.mesh import Mesh  # noqa: E402
from tests.policy_mesh import (  # noqa: E402
    ADMIN_TOKEN,
    SLOW_MS,
    Admin,
    Driver,
    make_policy_repository,
    percentile,
    simple_body,
    slow_body,
    split,
)


def start(tmp: Path, redis_url: str, gateways: int) -> Mesh:
    source = tmp / "examples"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "make_models.py"), str(source)],
        check=True,
        capture_output=True,
    )
    repo = make_policy_repository(source, tmp / "repo")
    logs = tmp / "logs"
    logs.mkdir()
    mesh = Mesh(redis_url, repo, log_dir=logs)
    mesh.start_scheduler()
    mesh.start_worker("worker-onnx", "onnxruntime")
    mesh.start_worker("worker-python", "python")
    mesh.start_gateway(processes=gateways, CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN)
    mesh.wait_ready(["simple", "slow"], timeout_s=120)
    return mesh


def measure_split(mesh: Mesh, admin: Admin, requests: int) -> None:
    assert admin.weights("simple", {"1": 80, "3": 20}).status_code == 200
    time.sleep(1.1)
    driver = Driver(mesh.url)
    started = time.perf_counter()
    answers = asyncio.run(
        driver.closed_loop(
            requests, 16, lambda i: ("/v2/models/simple/infer", simple_body(), {}, i)
        )
    )
    elapsed = time.perf_counter() - started
    statuses = Counter(a.status for a in answers)
    shares = split([a for a in answers if a.status == 200])
    print(
        f"split: {requests} requests in {elapsed:.1f} s ({requests / elapsed:.0f}/s), "
        f"statuses {dict(statuses)}, shares by version "
        + ", ".join(f"v{v}: {s:.1f} %" for v, s in shares.items())
    )
    assert admin.weights("simple", {"1": 20, "3": 80}).status_code == 200
    time.sleep(1.1)
    answers = asyncio.run(
        driver.closed_loop(
            requests // 4, 16, lambda i: ("/v2/models/simple/infer", simple_body(), {}, i)
        )
    )
    shares = split([a for a in answers if a.status == 200])
    print(
        f"after PUT {{'1': 20, '3': 80}} and 1.1 s: {requests // 4} requests, statuses "
        f"{dict(Counter(a.status for a in answers))}, shares "
        + ", ".join(f"v{v}: {s:.1f} %" for v, s in shares.items())
    )


def measure_rate_limit(mesh: Mesh, admin: Admin, seconds: float) -> None:
    put = admin.call(
        "PUT",
        "/v2/admin/tenants/figures",
        {"generate_keys": 1, "rate_limit": {"requests_per_second": 50, "burst": 10}},
    )
    key = put.json()["generated_keys"][0]
    time.sleep(1.1)
    headers = {"Authorization": f"Bearer {key}"}
    answers, duration = asyncio.run(
        Driver(mesh.url).open_loop(
            200, seconds, lambda i: ("/v2/models/simple/infer", simple_body(), headers, i)
        )
    )
    statuses = Counter(a.status for a in answers)
    admitted = [a for a in answers if a.status == 200]
    first = min(a.sent_at for a in answers)
    per_second = Counter(int(a.sent_at - first) for a in admitted)
    with_retry = sum(1 for a in answers if a.status == 429 and a.retry_after)
    print(
        f"rate limit 50/s burst 10: offered {len(answers)} in {duration:.2f} s "
        f"({len(answers) / duration:.0f}/s); admitted {len(admitted)} "
        f"= {len(admitted) / duration:.1f}/s (burst included), "
        f"{(len(admitted) - 10) / duration:.1f}/s after the burst; per second "
        f"{[per_second[s] for s in sorted(per_second)]}; statuses {dict(statuses)}; "
        f"429 with Retry-After: {with_retry}"
    )


def measure_priorities(mesh: Mesh, seconds: float, rate: float) -> None:
    capacity = 2 * 1000 / SLOW_MS  # max_batch_size 2 per execution
    answers, duration = asyncio.run(
        Driver(mesh.url).open_loop(
            rate,
            seconds,
            lambda i: ("/v2/models/slow/infer", slow_body(1 + i % 2), {}, 1 + i % 2),
        )
    )
    print(
        f"priorities under saturation: offered {rate:.0f}/s for {duration:.1f} s, "
        f"half priority 1 and half 2, on a model serving about {capacity:.0f}/s"
    )
    for level in (1, 2):
        mine = [a for a in answers if a.tag == level]
        ok = [a.latency_s * 1000 for a in mine if a.status == 200]
        refused = [a.latency_s * 1000 for a in mine if a.status != 200]
        print(
            f"  priority {level}: {len(mine)} sent, {len(ok)} answered 200: "
            f"p50 {percentile(ok, 50):.0f} ms, p99 {percentile(ok, 99):.0f} ms; "
            f"other statuses {dict(Counter(a.status for a in mine if a.status != 200))}"
            + (f" (answered in p99 {percentile(refused, 99):.0f} ms)" if refused else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rate-seconds", type=float, default=5.0)
    parser.add_argument("--priority-seconds", type=float, default=5.0)
    parser.add_argument("--priority-rate", type=float, default=150.0)
    parser.add_argument("--gateways", type=int, default=3)
    args = parser.parse_args()
    server = PrivateRedis().start()
    with tempfile.TemporaryDirectory() as tmp:
        mesh = start(Path(tmp), server.url, args.gateways)
        try:
            admin = Admin(mesh.url)
            print(f"mesh ready: {args.gateways} gateway processes on {mesh.url}")
            measure_split(mesh, admin, args.requests)
            measure_rate_limit(mesh, admin, args.rate_seconds)
            measure_priorities(mesh, args.priority_seconds, args.priority_rate)
        except (AssertionError, httpx.HTTPError):
            print(mesh.logs(), file=sys.stderr)
            raise
        finally:
            mesh.stop()
            server.stop()


if __name__ == "__main__":
    main()

"""What every hostile request must get, and the figures a fuzzing run reports."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis

from tests.waiting import eventually_sync

ANSWER_WITHIN_S = 15.0  # "never a hang": every answer well before this


@dataclass
class Tally:
    """Answers seen by one input class."""

    name: str
    statuses: Counter[str] = field(default_factory=Counter)
    slowest_s: float = 0.0

    def add(self, status: str, seconds: float) -> None:
        self.statuses[status] += 1
        self.slowest_s = max(self.slowest_s, seconds)

    def record(self) -> None:
        """Append the figures to ``$CONCH_CHAOS_REPORT`` (see tests/chaos/scenario.py)."""
        total = sum(self.statuses.values())
        print(f"{self.name}: {total} cases, answers {dict(self.statuses)}, "
              f"slowest {self.slowest_s:.2f} s")  # fmt: skip
        path = os.environ.get("CONCH_CHAOS_REPORT")
        if path:
            with open(path, "a") as report:
                entry = {
                    "kind": "fuzz",
                    "name": self.name,
                    "cases": total,
                    "statuses": dict(self.statuses),
                    "slowest_s": round(self.slowest_s, 3),
                }
                report.write(json.dumps(entry) + "\n")


def check_http_answer(response: httpx.Response | Any, seconds: float) -> None:
    """A 2xx, or a 4xx with Triton's ``{"error": "..."}``; never a 5xx, never slow. (Any
    response with ``status_code`` and ``content``: httpx's or requests'.)"""
    assert seconds < ANSWER_WITHIN_S, f"answered after {seconds:.1f} s"
    status = response.status_code
    assert status < 500, f"{status}: {response.content[:300]!r}"
    if status >= 400:
        try:
            body = json.loads(response.content)
        except ValueError:
            raise AssertionError(
                f"{status} without a JSON body: {response.content[:300]!r}"
            ) from None
        assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], (
            f"{status} without Triton's error body: {body!r}"
        )


def timed_post(client: httpx.Client, path: str, **kwargs: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = client.post(path, **kwargs)  # type: ignore[arg-type]
    return response, time.monotonic() - started


def orphans(redis_url: str, timeout_s: float = 30.0) -> dict[str, int]:
    """Entries left in any model's request or batch streams (queued or pending) and dead
    letters, once the mesh has had ``timeout_s`` to finish what it accepted."""
    client = redis.Redis.from_url(redis_url)

    def left() -> dict[str, int]:
        queued = pending = dead = 0
        for raw in client.scan_iter(match="conch:m:*", count=1000):
            key = raw.decode()
            if client.type(key) != b"stream":
                continue
            if key.endswith(":dead"):
                dead += client.xlen(key)
                continue
            queued += client.xlen(key)
            pending += sum(int(g["pending"]) for g in client.xinfo_groups(key))
        return {"queued": queued, "pending": pending, "dead-lettered": dead}

    try:
        return eventually_sync(
            left, lambda found: found["queued"] == found["pending"] == 0, timeout_s, every=0.5
        )
    finally:
        client.close()

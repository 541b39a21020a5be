"""Steady load of uniquely identified requests, and what became of each one.

Open loop: requests start at a fixed rate whatever the mesh does (a stalled mesh piles up work
in flight, as real clients would), each carrying a unique INT64 ``ID`` that the recording model
answers with ``3 * ID + 1``. Every request ends in exactly one outcome:

    ok        200 with its own answer
    wrong     200 with any other answer (someone else's, or garbage)
    refused   the mesh said no: 503/429 from a gateway (no live worker, queue full, too many
              in flight, Redis unreachable) or Envoy's "no healthy upstream"
    cut       the connection to a gateway was cut: Envoy's own 503 ("upstream ... reset") or
              the client's connection dropped without an answer
    lost      no answer in time: a gateway's deadline error (504/timeout) or nothing at all
              within the client's limit
    error     any other answer (another 4xx or 5xx)
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tests.chaos.chaos_mesh import MODEL

# A gateway answers by its deadline (30 s by default); past this the request hung.
CLIENT_TIMEOUT_S = 50.0
OUTCOMES = ("ok", "wrong", "refused", "cut", "lost", "error")


@dataclass(frozen=True)
class Outcome:
    number: int
    started: float  # time.monotonic()
    ended: float
    kind: str
    status: int
    detail: str


@dataclass
class Mix:
    """Who sends and at which priority: (API key or None, priority parameter or None)."""

    callers: list[tuple[str | None, int | None]] = field(default_factory=lambda: [(None, None)])

    def pick(self, rng: random.Random) -> tuple[str | None, int | None]:
        return rng.choice(self.callers)


def classify(number: int, status: int, body: bytes, content_type: str) -> tuple[str, str]:
    text = body[:300].decode(errors="replace")
    if status == 200:
        try:
            import json

            parsed = json.loads(body)
            outputs = {o["name"]: o["data"] for o in parsed["outputs"]}
            if outputs["OUTPUT0"] == [3 * number + 1] and parsed.get("id") == str(number):
                return "ok", ""
        except (ValueError, KeyError, TypeError):
            pass
        return "wrong", text
    is_json = "json" in content_type
    if not is_json and "no healthy upstream" in text:
        return "refused", text  # Envoy found no gateway it would send to
    if not is_json and status in (502, 503, 504) and ("upstream" in text or "reset" in text):
        return "cut", text
    if status == 504 or (is_json and ("timeout" in text.lower() or "deadline" in text.lower())):
        return "lost", text
    if status in (429, 503) and is_json:
        return "refused", text
    return "error", f"{status} {text}"


class Load:
    """Requests at ``rate`` per second from a thread of its own, until ``stop``."""

    def __init__(
        self,
        url: str,
        rate: float,
        numbers: itertools.count[int],
        mix: Mix | None = None,
        max_requests: int | None = None,
        seed: int = 12,
        on_outcome: Callable[[Outcome], None] | None = None,
    ):
        self.url = url
        self.rate = rate
        self.numbers = numbers
        self.mix = mix or Mix()
        self.max_requests = max_requests
        self.rng = random.Random(seed)
        self.outcomes: list[Outcome] = []
        self.sent = 0
        self.on_outcome = on_outcome
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self.finished = threading.Event()

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2 * CLIENT_TIMEOUT_S + 15) -> None:
        """Stop sending and wait for every request in flight to end."""
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("the load generator did not finish its requests")

    def in_flight(self) -> int:
        return self.sent - len(self.outcomes)

    def _run(self) -> None:
        asyncio.run(self._main())
        self.finished.set()

    async def _main(self) -> None:
        # Enough connections for every request a 50 s hang can pile up at these rates, so that
        # no request waits for a connection: each one's time is the mesh's.
        limits = httpx.Limits(max_connections=4096, max_keepalive_connections=64)
        timeout = httpx.Timeout(CLIENT_TIMEOUT_S, connect=5.0, pool=CLIENT_TIMEOUT_S)
        tasks: set[asyncio.Task[None]] = set()
        async with httpx.AsyncClient(base_url=self.url, limits=limits, timeout=timeout) as client:
            began = time.monotonic()
            while not self._stop.is_set():
                if self.max_requests is not None and self.sent >= self.max_requests:
                    break
                due = began + self.sent / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(min(delay, 0.05))
                    continue
                self.sent += 1
                task = asyncio.create_task(self._one(client, next(self.numbers)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.wait(tasks)

    async def _one(self, client: httpx.AsyncClient, number: int) -> None:
        key, priority = self.mix.pick(self.rng)
        body: dict[str, object] = {
            "id": str(number),
            "inputs": [{"name": "ID", "shape": [1, 1], "datatype": "INT64", "data": [number]}],
        }
        if priority is not None:
            body["parameters"] = {"priority": priority}
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        started = time.monotonic()
        try:
            response = await client.post(f"/v2/models/{MODEL}/infer", json=body, headers=headers)
            kind, detail = classify(
                number, response.status_code, response.content,
                response.headers.get("content-type", ""),
            )  # fmt: skip
            status = response.status_code
        except httpx.TimeoutException as exc:
            kind, detail, status = "lost", f"no answer: {exc!r}", 0
        except httpx.TransportError as exc:
            kind, detail, status = "cut", f"connection: {exc!r}", 0
        outcome = Outcome(number, started, time.monotonic(), kind, status, detail)
        self.outcomes.append(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    counts = Counter(o.kind for o in outcomes)
    return {kind: counts.get(kind, 0) for kind in OUTCOMES}

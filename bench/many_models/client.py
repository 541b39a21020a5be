"""The load generator: closed-loop HTTP clients in processes of their own, each request for a
model drawn from the Zipf mix.

Like bench/loadgen.py: raw HTTP/1.1 keep-alive connections on uvloop, the binary tensor
extension, ``concurrency`` connections spread over ``processes`` client processes (forked
before the run's sampler threads start), each sending its next request when the last is
answered. Unlike it, every request is recorded (model, send time on the machine's monotonic
clock, latency, outcome) so that the timeline can tell cold requests from warm ones. A request
that takes longer than ``request_timeout_s`` is recorded as a timeout and its connection
replaced; a broken connection as a socket error.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import time
from array import array
from dataclasses import dataclass
from multiprocessing.connection import Connection
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from bench.loadgen import read_answer
from bench.many_models.report import SOCKET_ERROR, TIMEOUT
from bench.many_models.repository import DIMS, INPUT, model_name
from bench.many_models.zipf import ZipfSampler


@dataclass(frozen=True)
class LoadPlan:
    url: str
    models: int  # the mix's ranks: models m0000 .. of this many
    concurrency: int
    processes: int
    duration_s: float
    seed: int
    s: float
    request_timeout_s: float


@dataclass(frozen=True)
class Records:
    """Every request of the run, in no particular order."""

    models: npt.NDArray[np.int64]
    sent: npt.NDArray[np.float64]  # time.monotonic() at send
    latency: npt.NDArray[np.float64]  # seconds
    status: npt.NDArray[np.int64]  # HTTP status, or TIMEOUT / SOCKET_ERROR
    cpu_s: float = 0.0  # the client processes' CPU time: was the client the bottleneck?


def request_parts(host: str, port: int, models: int) -> tuple[list[bytes], bytes]:
    """Each model's request head and the body they share (one row, fixed seed)."""
    row = np.random.default_rng(20261128).standard_normal((1, DIMS[0])).astype(np.float32)
    data = row.tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": INPUT,
                    "shape": [1, DIMS[0]],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ]
        },
        separators=(",", ":"),
    ).encode()
    body = header + data
    heads = [
        (
            f"POST /v2/models/{model_name(m)}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        for m in range(models)
    ]
    return heads, body


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
) -> tuple[int, bool]:
    """One request and its answer: the status, and whether the server keeps the connection."""
    writer.write(data)
    return await read_answer(reader)


async def _connection(plan: LoadPlan, parts: tuple[list[bytes], bytes], sampler: ZipfSampler,
                      stop_at: float, out: tuple[array[int], array[float], array[float],
                                                 array[int]]) -> None:  # fmt: skip
    heads, body = parts
    target = urlsplit(plan.url)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    models, sent, latency, status = out
    writer: asyncio.StreamWriter | None = None
    while time.monotonic() < stop_at:
        if writer is None:
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
        model = sampler.next()
        started = time.monotonic()
        keep = False
        try:
            async with asyncio.timeout(plan.request_timeout_s):
                outcome, keep = await _exchange(reader, writer, heads[model] + body)
        except TimeoutError:
            outcome = TIMEOUT
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            outcome = SOCKET_ERROR
        models.append(model)
        sent.append(started)
        latency.append(time.monotonic() - started)
        status.append(outcome)
        if not keep:  # lost, broken, or closed by the server: a new connection for the next
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


def _client(plan: LoadPlan, index: int, connections: int, begin: float, pipe: Connection) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    target = urlsplit(plan.url)
    parts = request_parts(target.hostname or "127.0.0.1", target.port or 80, plan.models)
    out = (array("q"), array("d"), array("d"), array("q"))

    async def run() -> None:
        await asyncio.sleep(max(0.0, begin - time.monotonic()))
        stop_at = begin + plan.duration_s
        samplers = [
            ZipfSampler(plan.models, [plan.seed, index, c], plan.s) for c in range(connections)
        ]
        await asyncio.gather(*(_connection(plan, parts, s, stop_at, out) for s in samplers))

    cpu_before = time.process_time()
    asyncio.run(run())
    cpu_s = time.process_time() - cpu_before
    pipe.send_bytes(json.dumps({"requests": len(out[0]), "cpu_s": cpu_s}).encode())
    for column in out:
        pipe.send_bytes(column.tobytes())
    pipe.close()


class LoadRun:
    """The client processes of one run: forked by :meth:`start`, gathered by :meth:`join`."""

    def __init__(self, plan: LoadPlan, begin: float):
        self.plan, self.begin = plan, begin
        self._pipes: list[Connection] = []
        self._children: list[mp.process.BaseProcess] = []

    def start(self) -> None:
        processes = max(1, min(self.plan.processes, self.plan.concurrency))
        c = self.plan.concurrency
        shares = [c // processes + (i < c % processes) for i in range(processes)]
        context = mp.get_context("fork")
        for index, share in enumerate(shares):
            ours, theirs = context.Pipe(duplex=False)
            child = context.Process(
                target=_client, args=(self.plan, index, share, self.begin, theirs), daemon=True
            )
            child.start()
            theirs.close()
            self._pipes.append(ours)
            self._children.append(child)

    def join(self) -> Records:
        columns: list[list[bytes]] = [[], [], [], []]
        cpu_s = 0.0
        for pipe in self._pipes:
            cpu_s += float(json.loads(pipe.recv_bytes())["cpu_s"])
            for column in columns:
                column.append(pipe.recv_bytes())
        for child in self._children:
            child.join()
        models, sent, latency, status = (
            np.frombuffer(b"".join(parts), dtype=kind)
            for parts, kind in zip(columns, ("<i8", "<f8", "<f8", "<i8"), strict=True)
        )
        return Records(
            models.astype(np.int64), sent.astype(np.float64), latency.astype(np.float64),
            status.astype(np.int64), cpu_s,
        )  # fmt: skip

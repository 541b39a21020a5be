"""A closed-loop HTTP load generator for one KServe v2 inference, in several processes.

    python -m bench.loadgen URL MODEL --input INPUT__0:FP32:1024 --concurrency 128 \\
        --duration 10 --warmup 3 [--processes 4] [--json]

For machines without the harness's ``wrk`` (the GPU machine: nothing can be installed there but
wheels): each connection sends the same request (the binary tensor extension, random FP32 data
from a fixed seed) and waits for the answer before the next, like ``wrk -cN``. Requests are
spread over ``--processes`` client processes, each on uvloop with raw HTTP/1.1 keep-alive
connections, so the client is not the bottleneck it would be in one Python process. Prints one
JSON line: req/s (2xx answers), latency percentiles, errors by status, the client's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

import numpy as np

_DTYPES = {"FP32": np.float32, "FP16": np.float16, "INT32": np.int32, "INT64": np.int64}


def build_request(host: str, port: int, model: str, inputs: list[str], batch: int) -> bytes:
    """One POST .../infer with the binary tensor extension (as tritonclient sends it)."""
    rng = np.random.default_rng(20261123)
    described: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for spec in inputs:
        name, datatype, dims = spec.split(":")
        shape = [batch, *(int(d) for d in dims.split("x"))]
        data = rng.standard_normal(shape).astype(_DTYPES[datatype]).tobytes()
        described.append(
            {
                "name": name,
                "shape": shape,
                "datatype": datatype,
                "parameters": {"binary_data_size": len(data)},
            }
        )
        blobs.append(data)
    header = json.dumps({"inputs": described}, separators=(",", ":")).encode()
    body = header + b"".join(blobs)
    head = (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/octet-stream\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One HTTP/1.1 answer read whole: its status, and whether the server keeps the
    connection open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lower = head.lower()
    at = lower.find(b"content-length:")
    length = int(lower[at + 15 : lower.find(b"\r\n", at)]) if at >= 0 else 0
    if length:
        await reader.readexactly(length)
    return int(head[9:12]), b"connection: close" not in lower


async def _connection(
    host: str,
    port: int,
    request: bytes,
    record_from: float,
    stop_at: float,
    out: dict[str, Any],
    repeat: int = 1,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    latencies: list[float] = out["latencies"]
    statuses: dict[int, int] = out["statuses"]
    try:
        while (started := time.perf_counter()) < stop_at:
            for _ in range(repeat):  # a client calling the model ``repeat`` times in a row
                writer.write(request)
                status, _ = await read_answer(reader)
                if not 200 <= status < 300:
                    break
            if started >= record_from:
                latencies.append(time.perf_counter() - started)
                statuses[status] = statuses.get(status, 0) + 1
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        out["socket_errors"] += 1
    finally:
        writer.close()


def _client(url: str, request: bytes, connections: int, warmup: float, duration: float,
            begin: float, pipe: Connection, repeat: int = 1) -> None:  # fmt: skip
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    out: dict[str, Any] = {"latencies": [], "statuses": {}, "socket_errors": 0}

    async def run() -> None:
        delay = begin - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        now = time.perf_counter()
        record_from, stop_at = now + warmup, now + warmup + duration
        await asyncio.gather(
            *(
                _connection(host, port, request, record_from, stop_at, out, repeat)
                for _ in range(connections)
            )
        )

    cpu_before = time.process_time()
    asyncio.run(run())
    out["cpu_s"] = time.process_time() - cpu_before
    pipe.send(out)
    pipe.close()


def measure(url: str, model: str, inputs: list[str], concurrency: int, duration: float,
            warmup: float, processes: int, batch: int = 1,
            repeat: int = 1) -> dict[str, Any]:  # fmt: skip
    parts = urlsplit(url)
    request = build_request(parts.hostname or "127.0.0.1", parts.port or 80, model, inputs, batch)
    processes = max(1, min(processes, concurrency))
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    begin = time.time() + 0.5  # every client process starts together
    context = mp.get_context("fork")
    pipes, children = [], []
    for share in shares:
        ours, theirs = context.Pipe(duplex=False)
        child = context.Process(
            target=_client, args=(url, request, share, warmup, duration, begin, theirs, repeat)
        )
        child.start()
        pipes.append(ours)
        children.append(child)
    results = [pipe.recv() for pipe in pipes]
    for child in children:
        child.join()
    latencies = np.sort(np.concatenate([np.asarray(r["latencies"]) for r in results]))
    statuses: dict[int, int] = {}
    for result in results:
        for status, count in result["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    ok = sum(count for status, count in statuses.items() if 200 <= status < 300)

    def pct(q: float) -> float:
        return (
            round(float(latencies[int(q * (len(latencies) - 1))]) * 1000, 3)
            if len(latencies)
            else 0.0
        )

    return {
        "model": model,
        "concurrency": concurrency,
        "batch": batch,
        "rps": round(ok / duration, 1),
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "errors": sum(c for s, c in statuses.items() if not 200 <= s < 300)
        + sum(r["socket_errors"] for r in results),
        "statuses": {str(s): c for s, c in sorted(statuses.items())},
        "client_processes": processes,
        "client_cpu": round(sum(r["cpu_s"] for r in results) / (warmup + duration), 2),
        "duration_s": duration,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loadgen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url")
    parser.add_argument("model")
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        help="NAME:DATATYPE:DIMS, e.g. INPUT__0:FP32:1024",
    )
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) // 4))
    parser.add_argument("--batch", type=int, default=1, help="rows per request")
    args = parser.parse_args(argv)
    result = measure(args.url, args.model, args.input, args.concurrency, args.duration,
                     args.warmup, args.processes, args.batch)  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Added latency per streamed response: from a decoupled model's ``send`` to the client.

    python -m bench.stream_latency [--concurrency 1 32] [--responses 32] [--seconds 10]

It writes a repository with one decoupled Python model, ``stream_clock`` (IN: how many
responses; DELAY_US: the pause between them), whose every response carries ``time.time_ns()``
taken just before ``send``; starts ``conch up`` on it (free ports, its private Redis); then, for
each concurrency, runs the load generator in a separate process: that many gRPC
``ModelStreamInfer`` streams (tritonclient's asyncio client), each sending its next request when
the last one's final response is in. Each response's latency is the client's clock at arrival
minus the model's clock at send (one machine, one clock): model process → worker → Redis →
gateway → gRPC → client. Prints p50/p90/p99/max and responses/s per concurrency, as JSON lines
and a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

MODEL = "stream_clock"
CONFIG = """\
name: "stream_clock"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "DELAY_US" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "SENT_NS" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
MODEL_PY = """\
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            delay = int(pb_utils.get_input_tensor_by_name(request, "DELAY_US").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, count, delay), daemon=True).start()
        return None

    def respond(self, sender, count, delay_us):
        for _ in range(count):
            if delay_us:
                time.sleep(delay_us / 1e6)
            sent = pb_utils.Tensor("SENT_NS", np.array([time.time_ns()], dtype=np.int64))
            sender.send(pb_utils.InferenceResponse(output_tensors=[sent]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def write_repository(path: Path) -> None:
    version = path / MODEL / "1"
    version.mkdir(parents=True, exist_ok=True)
    (path / MODEL / "config.pbtxt").write_text(CONFIG)
    (version / "model.py").write_text(MODEL_PY)


async def _client(
    url: str, concurrency: int, responses: int, delay_us: int, seconds: float
) -> dict[str, Any]:
    import numpy as np
    import tritonclient.grpc.aio as grpcclient

    latencies: list[int] = []
    stop_at = time.monotonic() + seconds
    warm_until = time.monotonic() + min(2.0, seconds / 4)
    counted = 0

    async def one_stream() -> None:
        nonlocal counted
        client = grpcclient.InferenceServerClient(url)
        go = asyncio.Queue[int]()

        async def requests() -> AsyncIterator[dict[str, Any]]:
            while True:
                await go.get()
                count = grpcclient.InferInput("IN", [1], "INT32")
                count.set_data_from_numpy(np.array([responses], dtype=np.int32))
                delay = grpcclient.InferInput("DELAY_US", [1], "INT32")
                delay.set_data_from_numpy(np.array([delay_us], dtype=np.int32))
                yield {"model_name": MODEL, "inputs": [count, delay]}

        go.put_nowait(1)
        got = 0
        try:
            async for result, error in client.stream_infer(requests()):
                now = time.time_ns()
                if error is not None:
                    raise RuntimeError(str(error))
                sent = int(result.as_numpy("SENT_NS")[0])
                if time.monotonic() >= warm_until:
                    latencies.append(now - sent)
                    counted += 1
                got += 1
                if got == responses:
                    got = 0
                    if time.monotonic() >= stop_at:
                        break
                    go.put_nowait(1)
        finally:
            await client.close()

    started = time.monotonic()
    await asyncio.gather(*(one_stream() for _ in range(concurrency)))
    elapsed = (
        time.monotonic() - max(started, warm_until - min(2.0, seconds / 4)) - min(2.0, seconds / 4)
    )
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6

    return {
        "concurrency": concurrency,
        "responses_per_request": responses,
        "delay_us": delay_us,
        "responses": counted,
        "responses_per_s": round(counted / max(elapsed, 1e-9), 1),
        "p50_ms": round(pct(0.50), 3),
        "p90_ms": round(pct(0.90), 3),
        "p99_ms": round(pct(0.99), 3),
        "max_ms": round(ordered[-1] / 1e6, 3),
    }


def _free_port() -> int:
    from conch.ports import free_port

    return free_port()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--responses", type=int, default=32, help="responses per request")
    parser.add_argument("--delay-us", type=int, default=0, help="model's pause between responses")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--client", help=argparse.SUPPRESS)  # url: run as the load generator
    args = parser.parse_args()
    if args.client:
        row = asyncio.run(
            _client(args.client, args.concurrency[0], args.responses, args.delay_us, args.seconds)
        )
        print(json.dumps(row), flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="conch-stream-bench-"))
    write_repository(work / "repo")
    http, grpc = _free_port(), _free_port()
    log = open(work / "conch-up.log", "w")  # noqa: SIM115 - open while the mesh runs
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    up = subprocess.Popen(
        [
            *(sys.executable, "-m", "conch", "up", "--model-repository", str(work / "repo")),
            *("--http-port", str(http), "--grpc-port", str(grpc), "--log-format", "text"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    rows = []
    try:
        deadline = time.monotonic() + 180
        while "Conch is ready at" not in (work / "conch-up.log").read_text(errors="replace"):
            if up.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"conch up did not start; see {work / 'conch-up.log'}")
            time.sleep(0.5)
        for concurrency in args.concurrency:
            done = subprocess.run(
                [
                    *(
                        sys.executable,
                        "-m",
                        "bench.stream_latency",
                        "--client",
                        f"localhost:{grpc}",
                    ),
                    *("--concurrency", str(concurrency), "--responses", str(args.responses)),
                    *("--delay-us", str(args.delay_us), "--seconds", str(args.seconds)),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        up.wait(timeout=60)
    print("\n| concurrency | responses/s | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['concurrency']} | {r['responses_per_s']:,} | {r['p50_ms']} | {r['p90_ms']} "
            f"| {r['p99_ms']} | {r['max_ms']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

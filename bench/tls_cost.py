"""What HTTPS costs the gateway: one mesh, two gateways on it (one plain, one TLS), measured in
alternating wrk windows by the harness's ``load.sh`` (wrk in its own process, keep-alive
connections as clients hold them), so the machine's drift falls on both sides.

    .venv/bin/python -m bench.tls_cost [--rounds 3] [--secs 8] [--cells mlp:64,add_sub:64]

Both gateways share the Redis, scheduler and ONNX Runtime worker; only the listener differs.
The certificates are made for the run (``tests.certificates``: an ECDSA P-256 server
certificate). Prints one line per window, with the gateway's own CPU per request (all its
processes, from ``/proc``: the figure the neighbours' load blurs least), and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench.tree_cpu import tree_cpu_seconds
from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.certificates import make_pki
from tests.mesh import Mesh
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "bench" / "harness"


def _repository(bench_root: Path) -> Path:
    repo = bench_root / "repo"
    if not (repo / "mlp").is_dir():
        subprocess.run([sys.executable, str(HARNESS / "make_models.py"), str(repo)], check=True)
    return repo


def _window(url: str, cell: str, secs: int, bench_root: Path, repo: Path) -> dict[str, float]:
    model, conc = cell.split(":")[:2]
    env = {
        **os.environ,
        "FORMAT": "json",
        "WARMUP": "2",
        "CHECK": "0",
        "BENCH_ROOT": str(bench_root),
        "BENCH_PY": sys.executable,
        "REPO": str(repo),
    }
    out = subprocess.run(
        ["bash", str(HARNESS / "load.sh"), url, model, conc, str(secs)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_cost", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--secs", type=int, default=8)
    parser.add_argument("--cells", default="mlp:64,add_sub:64")
    parser.add_argument("--bench-root", default="/tmp/conch-bench-tls")
    args = parser.parse_args()
    bench_root = Path(args.bench_root)
    bench_root.mkdir(parents=True, exist_ok=True)
    repo = _repository(bench_root)
    work = Path(tempfile.mkdtemp(prefix="conch-tls-cost-"))
    pki = make_pki(work / "pki")
    redis = PrivateRedis().start()
    plain_port, tls_port = free_port(), free_port()
    tls_env = {
        "CONCH_GATEWAY_HTTP_USE_SSL": "true",
        "CONCH_GATEWAY_HTTP_SERVER_CERT": str(pki.server.cert_path),
        "CONCH_GATEWAY_HTTP_SERVER_KEY": str(pki.server.key_path),
    }
    sides = {"plain": f"http://127.0.0.1:{plain_port}", "tls": f"https://127.0.0.1:{tls_port}"}
    context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    try:
        with Mesh(redis.url, repo, http_port=plain_port, log_dir=work) as mesh:
            mesh.start_scheduler()
            mesh.start_worker()
            # Two processes each: what "auto" gives on the 2-CPU machine the figures come from.
            mesh.start_gateway(2, "gateway-plain")
            mesh.start_gateway(
                2, "gateway-tls", None, CONCH_GATEWAY_HTTP_PORT=str(tls_port), **tls_env
            )

            def ready() -> bool:
                mesh.raise_if_dead()
                try:
                    return all(
                        httpx.get(f"{url}/v2/health/ready", verify=context, timeout=1).status_code
                        == 200
                        for url in sides.values()
                    )
                except httpx.HTTPError:
                    return False

            wait_until(ready, 120, every=0.5, failure=lambda: mesh.logs())
            gateways = {"plain": mesh.pid("gateway-plain"), "tls": mesh.pid("gateway-tls")}
            rows: dict[tuple[str, str], list[dict[str, float]]] = {}
            print("side cell rps p50_ms p99_ms errors machine_cores gateway_us_per_request")
            for _ in range(args.rounds):
                for cell in args.cells.split(","):
                    for side, url in sides.items():
                        before = tree_cpu_seconds(gateways[side])["total"]
                        row = _window(url, cell, args.secs, bench_root, repo)
                        used = tree_cpu_seconds(gateways[side])["total"] - before
                        # The window's requests, its 2 s of warm-up included (as alternate.sh).
                        row["gateway_us"] = 1e6 * used / max(1, row["requests"] + 2 * row["rps"])
                        rows.setdefault((side, cell), []).append(row)
                        print(
                            side,
                            cell,
                            *(row.get(k) for k in ("rps", "p50_ms", "p99_ms", "errors")),
                            row.get("machine_cpu"),
                            round(row["gateway_us"], 1),
                            flush=True,
                        )
            print("medians: side cell rps p50_ms p99_ms errors gateway_us_per_request")
            for (side, cell), found in sorted(rows.items()):
                print(
                    side,
                    cell,
                    *(
                        round(statistics.median(r[k] for r in found), 2)
                        for k in ("rps", "p50_ms", "p99_ms")
                    ),
                    sum(r["errors"] for r in found),
                    round(statistics.median(r["gateway_us"] for r in found), 1),
                )
    finally:
        redis.stop()


if __name__ == "__main__":
    main()

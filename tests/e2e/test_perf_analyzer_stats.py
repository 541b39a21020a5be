"""``perf_analyzer``'s server-side breakdown against Conch (issue 28): for a model whose batcher
waits (``max_queue_delay_microseconds``), one client at a time (each request a batch of one after
the wait: 0 us compute input and output before the fix), the server's compute input and output
are measured and the server-side total (queue + compute input + infer + output, read by
perf_analyzer from the statistics extension) matches the client's average latency within the
client's and the gateway's own overhead.

perf_analyzer is the binary of the ``tritonclient`` 2.40.0 wheel; ``scripts/fetch_perf_analyzer.sh``
installs it with its two libraries into ``.conch/perf_analyzer`` (or ``CONCH_PERF_ANALYZER_DIR``).
Without it the test is skipped, saying so.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conch.private_redis import PrivateRedis
from tests.e2e.test_statistics_paths import write_repository
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
QUEUE_DELAY_US = 20_000


def _perf_analyzer() -> Path:
    base = Path(os.environ.get("CONCH_PERF_ANALYZER_DIR", ROOT / ".conch" / "perf_analyzer"))
    binary = base / "bin" / "perf_analyzer"
    if not binary.exists():
        pytest.skip(f"no perf_analyzer at {binary}: run scripts/fetch_perf_analyzer.sh")
    return base


@pytest.fixture(scope="module")
def waiting_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    _perf_analyzer()
    repo = tmp_path_factory.mktemp("pa_repo")
    write_repository(repo, queue_delay_us=QUEUE_DELAY_US)
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("pa_logs"))
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(processes=1)
        mesh.wait_ready(["waits"], timeout_s=120)
        yield mesh
    finally:
        mesh.stop()


def test_perf_analyzer_sees_every_server_phase_and_a_total_that_adds_up(
    waiting_mesh: Mesh, tmp_path: Path
) -> None:
    base = _perf_analyzer()
    report = tmp_path / "report.csv"
    run = subprocess.run(
        [
            str(base / "bin" / "perf_analyzer"),
            *("-m", "waits", "-u", waiting_mesh.url, "-i", "http"),
            *("--concurrency-range", "1", "--measurement-interval", "2000"),
            *("--stability-percentage", "100", "--max-trials", "8", "-f", str(report)),
        ],
        env={**os.environ, "LD_LIBRARY_PATH": str(base / "lib")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    [row] = list(csv.DictReader(report.open()))
    us = {key: float(value) for key, value in row.items() if value and key != "Concurrency"}
    phases = ["Server Queue", "Server Compute Input", "Server Compute Infer"]
    phases.append("Server Compute Output")
    for phase in phases:
        assert us[phase] > 0, f"{phase} is 0 us: {row}\n{run.stdout}"
    server = sum(us[phase] for phase in phases)
    # The client's average: its summary line, and the CSV's parts (the CSV's "Network+Server
    # Send/Recv" is what the client waited beyond the server's total).
    [client] = [int(m) for m in re.findall(r"Avg latency: (\d+) usec", run.stdout)]
    parts = us["Client Send"] + us["Network+Server Send/Recv"] + us["Client Recv"] + server
    assert abs(parts - client) <= 0.01 * client + 10, (parts, client, row)
    # The server's own total is its phases (perf_analyzer's "overhead": success minus phases).
    [(total, unexplained)] = re.findall(
        r"Avg request latency: (\d+) usec \(overhead (\d+) usec", run.stdout
    )
    assert int(unexplained) <= 0.01 * int(total) + 10, run.stdout
    # The batcher's wait is most of every request's time, and the server saw all of it.
    assert us["Server Queue"] >= 0.5 * QUEUE_DELAY_US, row
    # What the client measured beyond the server's total is its own and the gateway's part.
    overhead = client - server
    assert 0 <= overhead <= 0.5 * client, f"server {server} us, client {client} us: {row}"

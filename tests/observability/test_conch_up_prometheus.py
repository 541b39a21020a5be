"""`conch up --with-prometheus`: a local Prometheus scrapes every service the mesh started."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from shared.prometheus_local import binary
from shared.redis_server import free_port
from tests.mesh import start_conch_up

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        binary() is None,
        reason="needs the `prometheus` binary (Debian: apt-get install -y "
        "--no-install-recommends prometheus)",
    ),
]


def _wait_line(seen: list[str], text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(text in line for line in list(seen)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not seen within {timeout_s} s:\n{''.join(seen[-40:])}")


def test_conch_up_with_prometheus_scrapes_every_service(
    model_repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(model_repository / "simple", repo / "simple")
    port, prom_port = free_port(), free_port()
    process = start_conch_up(
        repo,
        "--http-port",
        str(port),
        "--gateways",
        "1",
        "--with-prometheus",
        "--prometheus-port",
        str(prom_port),
    )
    seen: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(target=lambda: seen.extend(process.stdout), daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{prom_port}"
    try:
        _wait_line(seen, f"Conch is ready at http://localhost:{port}", 120)
        assert any(f"Prometheus: {url}" in line for line in seen), seen[-20:]
        deadline = time.monotonic() + 30
        jobs: dict[str, str] = {}
        while time.monotonic() < deadline:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]
            jobs = {t["labels"]["job"]: t["health"] for t in targets["activeTargets"]}
            if len(jobs) == 4 and set(jobs.values()) == {"up"}:
                break
            time.sleep(0.5)
        assert jobs == {
            "prometheus": "up",
            "conch-gateway": "up",
            "conch-scheduler": "up",
            "conch-worker": "up",
        }
        rules = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert {g["name"] for g in rules} >= {"conch.requests", "conch.alerts"}
        children = psutil.Process(process.pid).children(recursive=True)
        assert any("prometheus" in " ".join(c.cmdline()) for c in children)
    finally:
        children = psutil.Process(process.pid).children(recursive=True)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"

"""`conch up --with-prometheus`: a local Prometheus scrapes every service the mesh started."""

from __future__ import annotations

import re
import shutil
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from conch.ports import free_port
from tests.mesh import ConchUpOutput, needs_prometheus, start_conch_up, stop_conch_up
from tests.waiting import eventually_sync

pytestmark = [pytest.mark.e2e, needs_prometheus]


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
    output = ConchUpOutput(process)
    url = f"http://127.0.0.1:{prom_port}"
    try:
        output.wait_for(re.escape(f"Conch is ready at http://localhost:{port}"), 120)
        assert any(f"Prometheus: {url}" in line for line in output.seen), output.seen[-20:]

        def health() -> dict[str, str]:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]
            return {t["labels"]["job"]: t["health"] for t in targets["activeTargets"]}

        jobs = eventually_sync(
            health, lambda found: len(found) == 4 and set(found.values()) == {"up"}, 30, every=0.5
        )
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
        alive = stop_conch_up(process, signal.SIGINT)
    assert process.returncode == 0
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"

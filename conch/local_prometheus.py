"""A private Prometheus for local runs (``conch up --with-prometheus``) and for the tests.

It uses the system's ``prometheus`` binary (Debian: ``apt-get install prometheus``), a scrape
configuration written for the mesh's actual ports (static targets under the same job names as
the compose configuration, ``deploy/prometheus/prometheus.yml``) and the project's own recording
and alert rules from ``deploy/prometheus/rules``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES_DIR = DEPLOY / "rules"
JOBS = ("conch-gateway", "conch-scheduler", "conch-worker")


def binary() -> str | None:
    """The ``prometheus`` executable, or None where it is not installed."""
    return shutil.which("prometheus")


def config(
    targets: Mapping[str, Sequence[str]],
    *,
    scrape_interval: str = "5s",
    rules_dir: Path = RULES_DIR,
    self_target: str | None = None,
) -> dict[str, Any]:
    """The scrape configuration: job name -> ``host:port`` targets, every one on /metrics."""
    jobs = [
        {"job_name": job, "static_configs": [{"targets": list(addresses)}]}
        for job, addresses in targets.items()
        if addresses
    ]
    if self_target:
        jobs.insert(0, {"job_name": "prometheus", "static_configs": [{"targets": [self_target]}]})
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(rules_dir / "*.yml")],
        "scrape_configs": jobs,
    }


class LocalPrometheus:
    """Runs ``prometheus`` on loopback with its own config and data folder, until stopped."""

    def __init__(
        self,
        targets: Mapping[str, Sequence[str]],
        port: int,
        *,
        scrape_interval: str = "5s",
        workdir: Path | None = None,
        host: str = "127.0.0.1",
    ):
        self.port = port
        self.host = host
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="conch-prometheus-"))
        self.config_path = self.workdir / "prometheus.yml"
        self.config = config(targets, scrape_interval=scrape_interval, self_target=f"{host}:{port}")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LocalPrometheus:
        exe = binary()
        if exe is None:
            raise FileNotFoundError(
                "prometheus is not installed (Debian/Ubuntu: apt-get install prometheus)"
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no YAML writer needed at run time.
        self.config_path.write_text(json.dumps(self.config, indent=2))
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [
                exe,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready within {timeout_s} s: {self.log()}")

    def log(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

"""``python -m gateway`` / ``conch gateway``: uvicorn with several processes on one port."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import uvicorn

from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared import logs

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_dir() -> tuple[Path, bool]:
    """Prometheus multiprocess mode for the gateway's processes: a fresh folder whose path every
    process inherits before prometheus_client is imported (theirs: files of this run only).
    Returns the folder and whether it is a temporary one of ours to remove at exit."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):  # counters of an earlier run would add up
            stale.unlink(missing_ok=True)
        return path, False
    path = Path(tempfile.mkdtemp(prefix="conch-gateway-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    return path, True


def main() -> None:
    settings = GatewaySettings.from_env()
    logs.setup("gateway", settings.log_level, settings.log_format)
    path, ours = metrics_dir()
    try:
        _serve(settings)
    finally:
        if ours:
            shutil.rmtree(path, ignore_errors=True)


def _serve(settings: GatewaySettings) -> None:
    uvicorn.run(
        "gateway.app:app_from_env",
        factory=True,
        host=settings.host,
        port=settings.http_port,
        workers=max(1, settings.processes),
        loop="uvloop",
        # Inference below the ASGI layer when the fast path is on (gateway.http_protocol).
        http="gateway.http_protocol:InferHttpProtocol" if settings.infer_fast_path else "httptools",
        lifespan="on",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        log_config=None,
        # SIGTERM: stop accepting, answer every request in flight (up to its deadline), then
        # stop the reply reader and leave the registry.
        timeout_graceful_shutdown=graceful_shutdown_s(settings),
    )


if __name__ == "__main__":
    main()

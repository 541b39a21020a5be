"""``python -m gateway`` / ``conch gateway``: several processes serving one port.

The port is bound here, once and exclusively, and the processes inherit it
(``gateway.runtime.supervisor``). A port that is taken, or a setting that is invalid, stops the
service at once with ``EXIT_FINAL`` and a message naming the port, its holder and the setting.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from gateway.runtime import tls
from gateway.runtime.status import ProcessStatus
from gateway.runtime.supervisor import GatewayProcesses
from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared.runtime import cpu_budget, logs
from shared.runtime.exits import EXIT_FINAL
from shared.runtime.listen import PortError, bind_listener, check_free
from shared.wire.errors import ConchError

log = logging.getLogger("gateway.supervisor")

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
    try:
        settings = GatewaySettings.from_env()
        count = cpu_budget.gateway_processes(settings.processes)
        tls.check(settings)
    except ConchError as exc:
        print(f"conch gateway: {exc.message}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_FINAL) from None
    logs.setup("gateway", settings.log_level, settings.log_format)
    if settings.grpc_port == settings.http_port:
        print(
            f"conch gateway: CONCH_GATEWAY_HTTP_PORT and CONCH_GATEWAY_GRPC_PORT are both "
            f"{settings.http_port}; give them different ports",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(EXIT_FINAL)
    try:
        if settings.grpc_port:
            check_free(settings.host, settings.grpc_port, "gRPC", "CONCH_GATEWAY_GRPC_PORT")
        sock = bind_listener(settings.host, settings.http_port, "HTTP", "CONCH_GATEWAY_HTTP_PORT")
    except PortError as exc:
        print(f"conch gateway: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_FINAL) from None
    log.info(
        "gateway listening",
        extra={"host": settings.host, "port": settings.http_port, "processes": count},
    )
    path, ours = metrics_dir()
    status = ProcessStatus.create(count)
    try:
        code = GatewayProcesses(
            sock.fileno(),
            count,
            status,
            settings.start_attempts,
            graceful_shutdown_s(settings),
            sock.close,
        ).run()
    finally:
        sock.close()
        status.close(remove=True)
        if ours:
            shutil.rmtree(path, ignore_errors=True)
    raise SystemExit(code)


if __name__ == "__main__":
    main()

"""Wait for the gateway and every model to answer ready, printing each model as it comes up."""

from __future__ import annotations

import contextlib
import http.client
import time
from collections.abc import Callable

from conch.supervisor import Supervisor


def _get_status(url: str, path: str) -> int:
    host_port = url.split("//", 1)[1]
    host, _, port = host_port.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def wait_ready(
    url: str,
    models: list[str],
    timeout_s: float,
    supervisor: Supervisor,
    stopped: Callable[[], bool],
) -> bool:
    """Wait for the gateway and every model to be READY, printing progress as models come up."""
    deadline = time.monotonic() + timeout_s
    reported: set[str] = set()
    while time.monotonic() < deadline and not stopped():
        supervisor.check()
        with contextlib.suppress(OSError, http.client.HTTPException):
            if _get_status(url, "/v2/health/ready") == 200:
                for model in models:
                    if (
                        model not in reported
                        and _get_status(url, f"/v2/models/{model}/ready") == 200
                    ):
                        reported.add(model)
                        print(f"  model ready: {model}", flush=True)
                if len(reported) == len(models):
                    return True
        time.sleep(0.3)
    missing = sorted(set(models) - reported)
    if not stopped():
        print(
            f"conch up: not every model became ready within {timeout_s:.0f} s "
            f"(waiting for: {', '.join(missing)}); the mesh keeps running, see the logs above",
            flush=True,
        )
    return False

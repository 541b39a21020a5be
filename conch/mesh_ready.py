"""Wait for the gateway and every model to be ready, printing each model as it comes up.

The wait ends early, and ``conch up`` with it, when a service cannot start
(``conch.supervisor.StartupFailed``) or a model fails to load (:class:`ModelFailed`, from the load
errors the workers record in Redis: Triton's ``--exit-on-error``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from collections.abc import Callable

from conch.supervisor import Supervisor


class ModelFailed(Exception):
    """A model ``conch up`` serves failed to load."""

    def __init__(self, failed: dict[str, str]):
        self.failed = failed
        listing = "; ".join(f"model '{m}' failed to load: {e}" for m, e in sorted(failed.items()))
        super().__init__(listing)


def _get(url: str, path: str) -> tuple[int, bytes]:
    host_port = url.split("//", 1)[1]
    host, _, port = host_port.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_ready(
    url: str,
    models: list[str],
    timeout_s: float,
    supervisor: Supervisor,
    stopped: Callable[[], bool],
    load_errors: Callable[[], dict[str, str]],
) -> bool:
    """True once the gateway and every model are READY; False when stopped or out of time
    (having said what was missing). Raises ``StartupFailed`` or :class:`ModelFailed`."""
    deadline = time.monotonic() + timeout_s
    reported: set[str] = set()
    waiting_for = "the gateway did not answer"
    while time.monotonic() < deadline and not stopped():
        supervisor.check()
        failed = {m: e for m, e in load_errors().items() if m in models and m not in reported}
        if failed:
            raise ModelFailed(failed)
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, body = _get(url, "/v2/health/ready")
            waiting_for = _reason(body) if status != 200 else "the models' own readiness"
            for model in models:
                if model not in reported and _get(url, f"/v2/models/{model}/ready")[0] == 200:
                    reported.add(model)
                    print(f"  model ready: {model}", flush=True)
            if status == 200 and len(reported) == len(models):
                return True
        time.sleep(0.3)
    if not stopped():
        missing = sorted(set(models) - reported)
        print(
            f"conch up: the mesh was not ready within {timeout_s:.0f} s "
            f"(models not ready: {', '.join(missing) or 'none'}; the gateway says: "
            f"{waiting_for}); see the logs above, or give it longer with --ready-timeout",
            flush=True,
        )
    return False


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return "not ready"

"""Wait for the gateway and every model to be ready, printing each model as it comes up.

The wait ends early, and ``conch up`` with it, when a service cannot start
(``conch.supervisor.StartupFailed``) or a model fails to load (:class:`ModelFailed`, from the load
errors the workers record in Redis: Triton's ``--exit-on-error``). With ``--exit-on-error=false``
a model that fails is said and no longer waited for: the mesh serves the others.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
from collections.abc import Callable

from conch.http_wait import get
from conch.supervisor import Supervisor


class ModelFailed(Exception):
    """A model ``conch up`` serves failed to load."""

    def __init__(self, failed: dict[str, str]):
        self.failed = failed
        listing = "; ".join(f"model '{m}' failed to load: {e}" for m, e in sorted(failed.items()))
        super().__init__(listing)


def wait_ready(
    url: str,
    models: list[str],
    timeout_s: float,
    supervisor: Supervisor,
    stopped: Callable[[], bool],
    load_errors: Callable[[], dict[str, str]],
    *,
    exit_on_error: bool = True,
    context: ssl.SSLContext | None = None,
) -> list[str] | None:
    """The models that are READY once the gateway and every model are (all of ``models``, less
    those that failed to load under ``exit_on_error=False``); None when stopped or out of time
    (having said what was missing). Raises ``StartupFailed`` or :class:`ModelFailed`."""
    deadline = time.monotonic() + timeout_s
    reported: set[str] = set()
    models = list(models)
    waiting_for = "the gateway did not answer"
    while time.monotonic() < deadline and not stopped():
        supervisor.check()
        failed = {m: e for m, e in load_errors().items() if m in models and m not in reported}
        if failed and exit_on_error:
            raise ModelFailed(failed)
        for model, error in sorted(failed.items()):
            print(f"  model failed to load: {model}: {error} (--exit-on-error=false)", flush=True)
            models.remove(model)
        with contextlib.suppress(OSError, http.client.HTTPException):
            status, body = get(f"{url}/v2/health/ready", 2, context)
            waiting_for = _reason(body) if status != 200 else "the models' own readiness"
            for model in models:
                if model in reported:
                    continue
                if get(f"{url}/v2/models/{model}/ready", 2, context)[0] == 200:
                    reported.add(model)
                    print(f"  model ready: {model}", flush=True)
            if status == 200 and len(reported) == len(models):
                return models
        time.sleep(0.3)
    if not stopped():
        missing = sorted(set(models) - reported)
        print(
            f"conch up: the mesh was not ready within {timeout_s:.0f} s "
            f"(models not ready: {', '.join(missing) or 'none'}; the gateway says: "
            f"{waiting_for}); see the logs above, or give it longer with --ready-timeout",
            flush=True,
        )
    return None


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return "not ready"

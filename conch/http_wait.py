"""Wait for a URL to answer 200: how launchers know a service they started is up."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable


def wait_ok(url: str, timeout_s: float, on_tick: Callable[[], None] | None = None) -> bool:
    """Poll ``url`` until it answers 200 (True) or ``timeout_s`` passes (False).

    ``on_tick`` runs between polls (a supervisor restarting what died meanwhile, say).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if on_tick is not None:
            on_tick()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False

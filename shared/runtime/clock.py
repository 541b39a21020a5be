"""Wall-clock milliseconds: the clock that heartbeat expiries and deadlines share across hosts."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)

"""The collector settings a long-lived service process takes once it has started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.settings import GatewaySettings

# Run in a child: gc.freeze() and the thresholds are the whole process's, for good.
_PROBE = """
import gc, sys
from shared.runtime import gc_tuning
kept = [[n] for n in range(5000)]  # alive at "start-up": frozen
gc_tuning.settle(int(sys.argv[1]))
print(gc.get_threshold()[0], gc.get_freeze_count() >= len(kept))
"""


def _settle(threshold: int) -> tuple[int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(threshold)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return int(out[0]), out[1] == "True"


def test_settle_freezes_start_up_and_raises_the_young_threshold() -> None:
    threshold, frozen = _settle(20_000)
    assert threshold == 20_000
    assert frozen  # the objects alive at start-up are out of every collection's walk


def test_zero_leaves_pythons_own_collector() -> None:
    threshold, frozen = _settle(0)
    assert threshold == 700
    assert not frozen


@pytest.mark.parametrize(("env", "expected"), [(None, 20_000), ("0", 0), ("5000", 5_000)])
def test_the_gateway_reads_its_threshold_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str | None, expected: int
) -> None:
    if env is None:
        monkeypatch.delenv("CONCH_GATEWAY_GC_YOUNG_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("CONCH_GATEWAY_GC_YOUNG_THRESHOLD", env)
    assert GatewaySettings.from_env().gc_young_threshold == expected

"""Each fault under steady load: nothing lost, nothing run twice, no wrong answer, no refusal.

The short form (one strike each, a modest rate) runs with the suite; the full form (several
strikes at a higher rate) is marked ``chaos`` and runs with ``make chaos``.
"""

from __future__ import annotations

import pytest

from tests.chaos.chaos_mesh import ChaosMesh
from tests.chaos.faults import FAULTS
from tests.chaos.scenario import run_fault

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]


def _check(mesh: ChaosMesh, verdict_failures: dict[str, int], summary: str) -> None:
    assert not verdict_failures, f"{summary}\nservice logs:\n{mesh.logs(chars=800)}"


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_short(chaos_mesh: ChaosMesh, name: str) -> None:
    verdict = run_fault(chaos_mesh, name, FAULTS[name], rate=15, rounds=1)
    assert verdict.requests > 50
    _check(chaos_mesh, verdict.failures, f"{verdict.summary()}\n{verdict.examples}")


@pytest.mark.chaos
@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_full(chaos_mesh: ChaosMesh, name: str) -> None:
    verdict = run_fault(chaos_mesh, name, FAULTS[name], rate=40, rounds=3, after_s=8.0)
    assert verdict.requests > 500
    _check(chaos_mesh, verdict.failures, f"{verdict.summary()}\n{verdict.examples}")

"""This worker's sequence gauges: sequences held and slots offered per model version (summed
over its instances), and the fleet-wide backlog as the holders last read it."""

from __future__ import annotations

from shared import metrics

_held: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}


def update(model: str, version: int, instance: str, held: int, slots: int, backlog: int) -> None:
    instances = _held.setdefault((model, version), {})
    instances[instance] = (held, slots)
    _export(model, version)
    metrics.child(metrics.SEQUENCE_BACKLOG, model, version).set(backlog)


def forget(model: str, version: int, instance: str) -> None:
    instances = _held.get((model, version), {})
    instances.pop(instance, None)
    _export(model, version)


def held(model: str, version: int) -> int:
    """Sequences this worker's instances of the version hold now (on_demand eviction spares a
    model holding any); read from the heartbeat thread, hence the copy."""
    return sum(h for h, _ in list(_held.get((model, version), {}).values()))


def _export(model: str, version: int) -> None:
    instances = _held.get((model, version), {})
    metrics.child(metrics.SEQUENCES_ACTIVE, model, version).set(
        sum(h for h, _ in instances.values())
    )
    metrics.child(metrics.SEQUENCE_SLOTS, model, version).set(sum(s for _, s in instances.values()))

"""Hand-written, not prometheus_client's Counter: that would rename Triton's ``nv_*`` counters.

Triton's counters have no ``_total`` suffix (``nv_inference_request_success``), which
prometheus_client's Counter always adds, so dashboards and alerts written for Triton would find
nothing. A :class:`TritonCounter` is a plain dict of floats per label tuple, rendered in the text
format after the registry's own families.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client.utils import floatToGoString

MODEL = ("model", "version")


class _TritonChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class TritonCounter:
    """A counter exposed under its exact name, as Triton does (``# TYPE name counter``).

    Single-process only (workers and schedulers); increments happen on the event loop.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] = MODEL):
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self._children: dict[tuple[str, ...], _TritonChild] = {}
        self._lock = threading.Lock()
        TRITON_COUNTERS.append(self)

    def labels(self, *values: Any) -> _TritonChild:
        key = tuple(str(v) for v in values)
        found = self._children.get(key)
        if found is None:
            with self._lock:
                found = self._children.setdefault(key, _TritonChild())
        return found

    def value(self, *values: Any) -> float:
        child = self._children.get(tuple(str(v) for v in values))
        return child.value if child else 0.0

    def clear(self) -> None:
        self._children.clear()

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} counter"]
        for key, child in list(self._children.items()):
            labels = ",".join(
                f'{n}="{_escape(v)}"' for n, v in zip(self.labelnames, key, strict=True)
            )
            lines.append(f"{self.name}{{{labels}}} {floatToGoString(child.value)}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


TRITON_COUNTERS: list[TritonCounter] = []


def render_all() -> str:
    """Every Triton counter that has a series, in the text format (appended to the registry's)."""
    return "".join(c.render() for c in TRITON_COUNTERS if c._children)

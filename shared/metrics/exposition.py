"""The text every ``/metrics`` endpoint serves: this process's families, or all processes'.

Gateways run several processes behind one port; prometheus_client's multiprocess mode (a
directory in ``PROMETHEUS_MULTIPROC_DIR``) merges their files, so a scrape of any one of them
answers for all. Gauges that mirror in-memory state register a scrape hook instead of being set
on every change.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from shared.metrics.cache import COUNTER_TYPED
from shared.metrics.triton_counter import render_all

log = logging.getLogger("shared.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_scrape_hooks: list[Callable[[], None]] = []
_renderers: list[Callable[[], str]] = []


def on_scrape(hook: Callable[[], None]) -> None:
    """Run ``hook`` before each exposition (gauges read from in-memory state at scrape time)."""
    _scrape_hooks.append(hook)


def add_renderer(render: Callable[[], str]) -> None:
    """Text appended to a single-process exposition (families under exact names that
    prometheus_client would rename, such as a Python model's custom counters)."""
    _renderers.append(render)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The Prometheus text format of this process (or, in multiprocess mode, of all of them)."""
    for hook in list(_scrape_hooks):
        try:
            hook()
        except Exception:
            log.exception("metrics scrape hook failed")
    path = multiprocess_dir()
    if path:
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=path)
        return _counter_typed(generate_latest(merged))
    extra = "".join(_render(render) for render in list(_renderers))
    return _counter_typed(generate_latest(registry)) + (render_all() + extra).encode()


def _render(render: Callable[[], str]) -> str:
    try:
        return render()
    except Exception:
        log.exception("metrics renderer failed")
        return ""


def _counter_typed(text: bytes) -> bytes:
    """Triton's cache counters, kept as summed gauges, typed as the counters they are."""
    for name in COUNTER_TYPED:
        text = text.replace(f"# TYPE {name} gauge\n".encode(), f"# TYPE {name} counter\n".encode())
    return text

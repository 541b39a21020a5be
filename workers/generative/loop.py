"""Runs an :class:`~workers.generative.engine.Engine` on a thread of its own: steps while
there is work, sleeps on the engine's wake-up event while there is none (an idle engine costs
nothing)."""

from __future__ import annotations

import logging
import threading

from workers.generative.engine import Engine

log = logging.getLogger(__name__)


class EngineLoop:
    def __init__(self, engine: Engine, name: str = "generative-engine"):
        self.engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> EngineLoop:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stops stepping; generations still in flight end with an error saying so."""
        self._stop.set()
        self.engine.wakeup.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.engine.fail_all("the model is being unloaded; the generation was stopped")

    def _run(self) -> None:
        engine = self.engine
        while not self._stop.is_set():
            engine.wakeup.clear()
            if not engine.has_work():
                engine.wakeup.wait()
                continue
            try:
                engine.step()
            except Exception as exc:  # answer every generation, keep serving
                log.exception("generative engine step failed")
                engine.fail_all(f"generation failed: {type(exc).__name__}: {exc}")

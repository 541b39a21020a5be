"""A service's output, passed through to ``conch up``'s own, and the first error line in it.

``conch up`` reports why a service could not start with one line: the first line of its output
that says what went wrong. That is an error-level log line (its message, its ``error`` field,
the last line of its traceback), the exception line that ends a bare traceback, or a line a
service prints before it exits (``conch worker: ...``).
"""

from __future__ import annotations

import json
import re
import threading
from typing import IO, Any

_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")
_SERVICE_SAYS = re.compile(r"^conch [\w-]+: ")
_TEXT_ERROR = re.compile(r" (ERROR|CRITICAL) ")  # shared.runtime.logs' text format
_ERROR_LEVELS = {"error", "critical", "fatal"}
_MAX_LINE = 500

_write_lock = threading.Lock()


class FirstError:
    """Feed lines; ``line`` is the first one that says what went wrong (None until then)."""

    def __init__(self) -> None:
        self.line: str | None = None
        self._in_traceback = False

    def feed(self, raw: str) -> None:
        if self.line is not None:
            return
        text = raw.rstrip("\r\n")
        if self._in_traceback:
            if text and not text[0].isspace():
                self._in_traceback = False
                if _EXCEPTION.match(text):
                    self._found(text)
            return
        if text.startswith("Traceback (most recent call last)"):
            self._in_traceback = True
        elif text.startswith("{"):
            self._json(text)
        elif _SERVICE_SAYS.match(text) or _EXCEPTION.match(text) or _TEXT_ERROR.search(text):
            self._found(text)

    def _json(self, text: str) -> None:
        try:
            entry: Any = json.loads(text)
        except ValueError:
            return
        if not isinstance(entry, dict) or str(entry.get("level", "")).lower() not in _ERROR_LEVELS:
            return
        message = str(entry.get("msg", ""))
        if message.startswith("Traceback"):  # uvicorn logs a traceback as the message
            message = _last_line(message)
        detail = entry.get("error") or (_last_line(str(entry["exc"])) if entry.get("exc") else "")
        self._found(f"{message}: {detail}" if detail and str(detail) not in message else message)

    def _found(self, text: str) -> None:
        self.line = text if len(text) <= _MAX_LINE else text[:_MAX_LINE] + "…"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else text


def pump(source: IO[bytes], sink: IO[str], first: FirstError) -> threading.Thread:
    """Copy ``source`` to ``sink`` line by line on a thread, watching for the first error."""

    def run() -> None:
        with source:
            for raw in iter(source.readline, b""):
                line = raw.decode(errors="replace")
                first.feed(line)
                with _write_lock:
                    try:
                        sink.write(line if line.endswith("\n") else line + "\n")
                        sink.flush()
                    except (OSError, ValueError):  # our own output is gone; keep draining
                        pass

    thread = threading.Thread(target=run, daemon=True, name="service-output")
    thread.start()
    return thread

"""Structured logs: one JSON object per line, carrying the service and the request id.

Hand-written rather than python-json-logger: its formatter would need ``add_fields`` replaced to
keep these exact fields (the ``ts`` form, a lower-case ``level``, the request id from a context
variable, ``extra_`` for colliding extras), leaving nothing of it but the msgspec encoder used here.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from typing import Any

import msgspec

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
_json = msgspec.json.Encoder()


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                # Never let an extra field overwrite the line's own keys.
                entry[f"extra_{key}" if key in entry else key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return _json.encode(entry).decode("utf-8", errors="replace")


class TextFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = {
            k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
        }
        request_id = request_id_var.get()
        if request_id:
            extras["request_id"] = request_id
        return base + ("" if not extras else " " + " ".join(f"{k}={v}" for k, v in extras.items()))


def setup(service: str, level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

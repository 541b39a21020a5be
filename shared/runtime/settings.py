"""Settings read from the environment, one prefix per service, and passed into factories.

Nothing reads the environment at import time: ``from_env`` is called by a service's entry point
and the result handed to ``create_app(settings)`` or the service constructor.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Self

import msgspec

from shared.wire.errors import ConchError, ErrorCode


class Settings(msgspec.Struct, kw_only=True):
    """Base for every service's settings; ``redis_url`` is read without the service prefix."""

    # Fields that every service reads from CONCH_<NAME> rather than CONCH_<SERVICE>_<NAME>.
    __common__ = (
        "redis_url",
        "redis_wait_replicas",
        "redis_wait_timeout_ms",
        "log_level",
        "log_format",
        "direct_path",
    )
    __prefix__ = "CONCH_"

    # redis://, rediss://, unix:// or, for Redis Cluster, redis+cluster://host:port,host:port
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Write concern of admission and dispatch (``shared.fleet.durability``): WAIT for this many
    # replicas, at most this long, after each. 0: asynchronous replication only.
    redis_wait_replicas: int = 0
    # The longest a WAIT for those replicas may take (ms) before the write goes on without them.
    redis_wait_timeout_ms: int = 100
    # Level of the service's own log lines (DEBUG, INFO, WARNING, ERROR); the fleet's levels
    # may also be changed at runtime through v2/logging.
    log_level: str = "INFO"
    # "json": one JSON object per line, with the request id; "text": lines for a person.
    log_format: str = "json"
    # The direct path (``shared.fleet.direct_path``): a request of a model whose batcher never waits
    # goes straight to an idle instance when nothing is queued. Read by every submitter (the
    # gateway, the schedulers' ensemble steps, BLS calls): CONCH_DIRECT_PATH=0 turns it off.
    direct_path: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in msgspec.structs.fields(cls):
            prefix = "CONCH_" if field.name in cls.__common__ else cls.__prefix__
            key = f"{prefix}{field.name.upper()}"
            if key in env:
                values[field.name] = _parse(env[key], field.type)
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return msgspec.convert(values, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise ConchError(
                ErrorCode.INVALID_ARG, f"invalid {cls.__name__} setting: {exc}"
            ) from exc


def _parse(raw: str, annotation: Any) -> Any:
    """Environment values are strings; lists are comma-separated."""
    origin = getattr(annotation, "__origin__", None)
    if origin in (list, tuple):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw

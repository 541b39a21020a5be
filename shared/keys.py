"""Every Redis key and stream name that crosses a service boundary.

Per-model keys share the hash tag ``{model}`` so that a model's streams, readiness sets and
scripts live in one Redis Cluster slot and one Lua script may touch them all.
"""

from __future__ import annotations

PREFIX = "conch"

# Consumer groups.
SCHEDULER_GROUP = "scheduler"
WORKER_GROUP = "workers"

# Stream entry fields.
FIELD_HEADER = b"h"
FIELD_DATA = b"d"


def models() -> str:
    """HASH model name -> normalized config JSON, written by the workers that load the model."""
    return f"{PREFIX}:models"


def models_rev() -> str:
    """Counter bumped whenever ``models()`` changes, so readers refresh only on change."""
    return f"{PREFIX}:models:rev"


def _model(model: str) -> str:
    return f"{PREFIX}:m:{{{model}}}"


def model_versions(model: str) -> str:
    """SET of the versions that some worker has loaded (live or not)."""
    return f"{_model(model)}:versions"


def ready(model: str, version: int) -> str:
    """ZSET worker id -> heartbeat expiry (ms since epoch); live while the score is ahead."""
    return f"{_model(model)}:ready:{version}"


def instances(model: str, version: int) -> str:
    """HASH worker id -> number of execution instances of this version on that worker."""
    return f"{_model(model)}:instances:{version}"


def request_stream(model: str, version: int, priority: int) -> str:
    """STREAM of requests for one (model, version, priority level); read by the schedulers."""
    return f"{_model(model)}:req:{version}:p{priority}"


def batch_stream(model: str, version: int) -> str:
    """STREAM of formed batches for one (model, version); read by the workers."""
    return f"{_model(model)}:batch:{version}"


def reply_stream(owner: str) -> str:
    """STREAM of replies for one gateway process (no consumer group; one reader)."""
    return f"{PREFIX}:reply:{owner}"


def stats(model: str, version: int) -> str:
    """HASH of cumulative statistics counters for one (model, version)."""
    return f"{_model(model)}:stats:{version}"


def service_registry(kind: str) -> str:
    """ZSET service id -> heartbeat expiry (ms), per kind: gateway, scheduler, worker."""
    return f"{PREFIX}:services:{kind}"


def service_info(kind: str, service_id: str) -> str:
    """HASH of one service's details (host, port, pid, backend, models), expiring with it."""
    return f"{PREFIX}:service:{kind}:{service_id}"

"""The load failures the workers record in Redis, as `conch up` watches them."""

from __future__ import annotations

import json
from typing import cast

import redis

from shared.runtime import redis_cluster
from shared.wire import keys


class LoadErrors:
    """The load failures the workers record (``shared.fleet.expected_models``), since ``conch up``
    started: a model that failed to load stops it, as Triton's ``--exit-on-error`` does."""

    def __init__(self, redis_url: str, since_ms: int):
        self._since_ms = since_ms - 1000  # clock skew between processes of one machine
        self._client: redis.Redis = (
            redis_cluster.sync_client(redis_url, socket_timeout=2, name="conch-up")  # type: ignore[assignment]  # same commands
            if redis_cluster.is_cluster(redis_url)
            else redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        )

    def __call__(self) -> dict[str, str]:
        try:
            raw = self._client.hgetall(keys.load_errors())
        except redis.RedisError:
            return {}
        found: dict[str, str] = {}
        for name, payload in cast(dict[bytes, bytes], raw).items():  # decode_responses=False
            error = json.loads(payload)
            if int(error.get("ms", 0)) >= self._since_ms:
                found[name.decode()] = str(error.get("message", ""))
        return found

    def close(self) -> None:
        self._client.close()

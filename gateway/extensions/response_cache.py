"""Triton's response cache, shared by every gateway of the fleet through a cache Redis.

A model whose configuration has ``response_cache { enable: true }`` gets each successful
response stored under a hash of what determines it: model, version, the inputs (name, datatype,
shape, bytes), the requested outputs and the request parameters that reach the model. A request
whose hash is found is answered at the gateway, without queueing; any gateway's entry serves every
gateway. Never for sequence or decoupled models; an ensemble caches when every model it composes
(at any depth) could (Triton's rule); classification and shared memory outputs apply after the
cache, to the cached tensors.

Storage: a Redis of its own (``CONCH_GATEWAY_CACHE_REDIS_URL``; ``conch up --cache-config``
starts one) with ``maxmemory`` as the size bound and ``maxmemory-policy allkeys-lru``. Redis then
evicts the least recently used entries itself, a lookup is one GET and an insert one SET, and no
eviction can ever touch the mesh's own state (streams, registry), as a server-wide policy on the
main Redis would. TTLs alone would bound age, not size.

The cache never fails a request: while its Redis is unreachable (or slow), requests are served
uncached, and it is tried again a second later.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from gateway.core.request import ParsedRequest
from gateway.core.validation import ValidRequest
from gateway.extensions.cache_stats import CacheStats
from shared.model_config import ModelConfig
from shared.wire import envelope
from shared.wire.envelope import Tensor

log = logging.getLogger(__name__)

PREFIX = "conch:cache"
# Request parameters that change how a request is scheduled, never what the model computes.
SCHEDULING_PARAMETERS = frozenset({"priority", "timeout", "binary_data_output"})
_params = msgspec.msgpack.Encoder(order="deterministic")
_decode_outputs = msgspec.msgpack.Decoder(list[Tensor]).decode


def cacheable(config: ModelConfig, configs: Mapping[str, ModelConfig]) -> bool:
    """Whether responses of this model may be cached (Triton's rules; pure)."""
    if not config.json.get("response_cache", {}).get("enable", False):
        return False
    return _may_cache(config, configs, set())


def _may_cache(config: ModelConfig, configs: Mapping[str, ModelConfig], seen: set[str]) -> bool:
    if config.sequence_batching is not None:
        return False
    if config.json.get("model_transaction_policy", {}).get("decoupled", False):
        return False
    if config.ensemble_scheduling is None:
        return True
    if config.name in seen:
        return False
    seen.add(config.name)
    for step in config.ensemble_scheduling.get("step", []):
        composed = configs.get(step.get("model_name", ""))
        if composed is None or not _may_cache(composed, configs, seen):
            return False
    return True


def request_key(
    model: str, version: int, valid: ValidRequest, parameters: Mapping[str, Any]
) -> str:
    """The entry's key: ``conch:cache:<model>:<version>:<128-bit hash of the request>``."""
    digest = hashlib.blake2b(digest_size=16)
    for tensor in valid.inputs:
        digest.update(tensor.name.encode())
        digest.update(b"\0")
        digest.update(tensor.datatype.encode())
        digest.update(repr(tensor.shape).encode())
        digest.update(len(tensor.data).to_bytes(8, "little"))
        digest.update(tensor.data)
    digest.update(repr(sorted(o.name for o in valid.outputs)).encode())
    digest.update(
        _params.encode({k: v for k, v in parameters.items() if k not in SCHEDULING_PARAMETERS})
    )
    return f"{PREFIX}:{model}:{version}:{digest.hexdigest()}"


@dataclass(frozen=True)
class Lookup:
    """One request's lookup: its key, when and how long, and the cached outputs of a hit."""

    model: str
    version: int
    key: str
    lookup_ns: int
    outputs: list[Tensor] | None


class ResponseCache:
    """One gateway process's client of the cache Redis."""

    def __init__(
        self,
        url: str,
        stats: CacheStats,
        timeout_s: float = 0.25,
        max_entry_bytes: int = 16 * 1024 * 1024,
    ):
        self.enabled = bool(url)
        self._client: aioredis.Redis | None = None
        if url:
            self._client = aioredis.Redis.from_url(
                url,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
                max_connections=256,
            )
        self._timeout_s = timeout_s
        self._max_entry_bytes = max_entry_bytes
        self.stats = stats
        self._down_until = 0.0
        self._eligible: dict[str, tuple[ModelConfig, bool]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def applies(self, config: ModelConfig, configs: Mapping[str, ModelConfig]) -> bool:
        """Cached per configuration object: the hot path pays one dict lookup."""
        if not self.enabled:
            return False
        found = self._eligible.get(config.name)
        if found is None or found[0] is not config:
            found = self._eligible[config.name] = (config, cacheable(config, configs))
        return found[1]

    async def find(
        self,
        config: ModelConfig,
        configs: Mapping[str, ModelConfig],
        version: int,
        valid: ValidRequest,
        parsed: ParsedRequest,
    ) -> Lookup | None:
        """The request's lookup (a hit is counted here), None when the model does not cache."""
        if not self.applies(config, configs):
            return None
        started = time.perf_counter_ns()
        key = request_key(config.name, version, valid, parsed.parameters)
        outputs = await self.lookup(key)
        elapsed = time.perf_counter_ns() - started
        if outputs is not None:
            self.stats.hit(config.name, version, elapsed)
        return Lookup(config.name, version, key, elapsed, outputs)

    async def lookup(self, key: str) -> list[Tensor] | None:
        """The cached outputs, or None (a miss, or the cache is unreachable)."""
        client = self._client
        if client is None or time.monotonic() < self._down_until:
            return None
        try:
            async with asyncio.timeout(self._timeout_s):  # no task per lookup, as wait_for makes
                raw = await client.get(key)
        except Exception as exc:  # never fail a request for the cache
            self._went_down(exc)
            return None
        if raw is None:
            return None
        try:
            return _decode_outputs(cast(bytes, raw))  # decode_responses=False: bytes
        except msgspec.DecodeError:
            return None

    def store(self, lookup: Lookup, outputs: list[Tensor]) -> None:
        """Insert a miss's answer in the background (the response does not wait); the miss is
        counted then, with the lookup and the insertion times (Triton's miss duration)."""
        task = asyncio.create_task(
            self._store(lookup.key, lookup.model, lookup.version, outputs, lookup.lookup_ns)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store(
        self, key: str, model: str, version: int, outputs: list[Tensor], lookup_ns: int
    ) -> None:
        started = time.perf_counter_ns()
        client = self._client
        value = envelope.encode(outputs)
        if client is not None and len(value) <= self._max_entry_bytes:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await client.set(key, value)
            except Exception as exc:
                self._went_down(exc)
        self.stats.miss(model, version, lookup_ns + time.perf_counter_ns() - started)

    async def invalidate(self, model: str) -> int:
        """Drop every entry of a model (it was loaded again or unloaded); returns how many."""
        client = self._client
        if client is None:
            return 0
        pattern = f"{PREFIX}:{_glob_escape(model)}:*"
        dropped = 0
        try:
            batch: list[bytes] = []
            async for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    dropped += await client.unlink(*batch)
                    batch.clear()
            if batch:
                dropped += await client.unlink(*batch)
        except Exception as exc:
            log.warning(
                "could not drop a model's cache entries",
                extra={"model": model, "error": f"{type(exc).__name__}: {exc}"},
            )
        return dropped

    async def check(self) -> None:
        """Warn (once, at start) when the cache Redis would not evict: it would fill and refuse."""
        client = self._client
        if client is None:
            return
        try:
            found = await client.config_get("maxmemory*")
        except Exception as exc:
            log.warning("response cache Redis not reachable yet", extra={"error": str(exc)})
            return
        values = {_text(k): _text(v) for k, v in found.items()}
        policy, limit = values.get("maxmemory-policy", ""), values.get("maxmemory", "0")
        if not policy.startswith("allkeys-") or limit == "0":
            log.warning(
                "the response cache Redis has no size bound with eviction; set maxmemory and "
                "maxmemory-policy allkeys-lru on it (conch up --cache-config local,size=N does)",
                extra={"maxmemory": limit, "policy": policy},
            )

    def _went_down(self, exc: Exception) -> None:
        if time.monotonic() >= self._down_until:
            log.warning(
                "response cache unreachable; serving uncached for 1 s",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
        self._down_until = time.monotonic() + 1.0

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)

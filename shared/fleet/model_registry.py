"""The fleet's model configurations in Redis, written by the workers that load them.

Gateways and schedulers cache them and reload only when the revision counter moves. A fleet of
thousands of models (on_demand mode) loads and unloads all the time: a load that publishes the
configuration already there does not move the revision, and a reload parses only the
configurations whose bytes changed (parsing one costs far more than reading it).
"""

from __future__ import annotations

import msgspec
import redis.asyncio as aioredis

from shared import model_config
from shared.fleet import change_feed
from shared.model_config import ModelConfig
from shared.wire import keys

_json = msgspec.json


async def publish_model(r: aioredis.Redis, config: ModelConfig) -> None:
    """Make the configuration visible to gateways and schedulers (bumps the revision, unless
    the same configuration is published already)."""
    payload = _json.encode(config.to_json())
    if await r.hget(keys.models(), config.name) == payload:
        return
    async with r.pipeline(transaction=True) as pipe:
        pipe.hset(keys.models(), config.name, payload)
        pipe.incr(keys.models_rev())
        await pipe.execute()
    await change_feed.announce(r, change_feed.named(change_feed.MODELS, config.name))


async def ensure_published(r: aioredis.Redis, configs: list[ModelConfig]) -> bool:
    """Publish any of these configurations Redis has lost (a restart without persistence).

    Returns True when something had to be restored; the revision is bumped only then, so the
    gateways' and schedulers' caches reload only after a real loss.
    """
    if not configs:
        return False
    async with r.pipeline(transaction=False) as pipe:
        for config in configs:
            pipe.hsetnx(keys.models(), config.name, _json.encode(config.to_json()))
        added = await pipe.execute()
    if any(added):
        await r.incr(keys.models_rev())
        await change_feed.announce(r, change_feed.MODELS)
        return True
    return False


async def read_models(r: aioredis.Redis) -> tuple[int, dict[str, ModelConfig]]:
    """The revision and every published configuration."""
    async with r.pipeline(transaction=True) as pipe:
        pipe.get(keys.models_rev())
        pipe.hgetall(keys.models())
        rev, raw = await pipe.execute()
    configs: dict[str, ModelConfig] = {}
    parsed: dict[bytes, ModelConfig] = {}
    for name, payload in raw.items():
        config = _parsed.get(payload)
        if config is None:
            config = model_config.from_json(_json.decode(payload), source=f"registry:{name!r}")
        parsed[payload] = config
        configs[config.name] = config
    _parsed.clear()  # only what the registry holds now: the cache never outgrows it
    _parsed.update(parsed)
    return int(rev or 0), configs


async def read_configs(r: aioredis.Redis, names: list[str]) -> dict[str, ModelConfig]:
    """The published configurations of these models (those published: a missing one is not
    in the answer)."""
    if not names:
        return {}
    raw = await r.hmget(keys.models(), names)
    configs: dict[str, ModelConfig] = {}
    for name, found in zip(names, raw, strict=True):
        if found is None:
            continue
        payload = found.encode() if isinstance(found, str) else found
        config = _parsed.get(payload)
        if config is None:
            config = model_config.from_json(_json.decode(payload), source=f"registry:{name!r}")
            _parsed[payload] = config
        configs[name] = config
    return configs


# Configuration bytes -> parsed (frozen) configuration, as of this process's last read.
_parsed: dict[bytes, ModelConfig] = {}

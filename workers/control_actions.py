"""What a load or an unload control message does on this worker, answered with one ack.

A load reads the model directory (with the message's config override, if any), loads the
versions its version_policy selects that are not loaded yet, and retires the loaded ones it no
longer selects. An unload retires the versions named (every loaded one by default). A version
that has weight is never retired: the whole message is refused instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import redis.asyncio as aioredis

from shared import control, keys, model_config, repository
from shared.control import ControlAck, ControlMessage, IndexEntry
from shared.errors import ConchError
from shared.model_paths import check_model_name
from shared.repository import RepositoryModel
from workers.backend import Backend
from workers.loader import LoadedVersion, VersionLoadError
from workers.settings import WorkerSettings


class ModelHost(Protocol):
    """What fleet control needs from the worker: what it serves, and starting or stopping a
    version (``workers.version_host.VersionHost``)."""

    @property
    def redis(self) -> aioredis.Redis: ...

    @property
    def settings(self) -> WorkerSettings: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def id(self) -> str: ...

    @property
    def loaded(self) -> Mapping[tuple[str, int], LoadedVersion]: ...

    async def start(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load (all or nothing; ``VersionLoadError``), serve, mark ready, route to them."""
        ...

    async def stop(self, key: tuple[str, int]) -> None:
        """Route around, unmark, drain, stop serving, unload."""
        ...


def ack(host: ModelHost, status: str, message: str = "", **kwargs: list[int]) -> ControlAck:
    return ControlAck(worker=host.id, status=status, message=message, **kwargs)


async def load(host: ModelHost, message: ControlMessage) -> ControlAck:
    name = message.model
    redis = host.redis
    try:
        check_model_name(name)
    except ConchError as exc:
        return ack(host, control.ACK_ERROR, exc.message)
    model_dir = Path(host.settings.model_repository) / name
    if not model_dir.is_dir():
        return ack(host, control.ACK_ERROR, f"no model directory '{name}' in the model repository")
    try:
        override = None
        if message.config is not None:
            override = model_config.from_json(message.config, source=f"override of {name!r}")
        model = repository.read_model(model_dir, override)
    except ConchError as exc:
        await control.write_index(redis, {name: IndexEntry(error=exc.message)})
        return ack(host, control.ACK_ERROR, exc.message)
    await control.write_index(redis, {name: IndexEntry(versions=model.available_versions)})
    if not host.backend.accepts(model.config):
        return ack(
            host,
            control.ACK_SKIPPED,
            f"backend '{host.settings.backend}' does not serve "
            f"'{model.config.backend or model.config.platform}'",
        )
    target = set(model.versions)
    if not target:
        return ack(
            host,
            control.ACK_ERROR,
            f"no version of '{name}' to load: versions on disk "
            f"{model.available_versions or 'none'}, version_policy "
            f"{model.config.version_policy.kind}",
        )
    current = {v for (m, v) in host.loaded if m == name}
    retire = sorted(current - target)
    weighted = await _weighted(redis, name, retire)
    if weighted:
        return ack(host, control.ACK_ERROR, _weighted_message(name, weighted))
    try:
        loaded = await host.start(model, sorted(target - current))
    except VersionLoadError as exc:
        return ack(host, control.ACK_ERROR, str(exc))
    await asyncio.gather(*(host.stop((name, v)) for v in retire))
    return ack(host, control.ACK_OK, loaded=[lv.version for lv in loaded], unloaded=retire)


async def unload(host: ModelHost, message: ControlMessage) -> ControlAck:
    name = message.model
    versions = sorted(
        v
        for (m, v) in host.loaded
        if m == name and (message.versions is None or v in message.versions)
    )
    weighted = await _weighted(host.redis, name, versions)
    if weighted:
        return ack(host, control.ACK_ERROR, _weighted_message(name, weighted))
    await asyncio.gather(*(host.stop((name, v)) for v in versions))
    return ack(host, control.ACK_OK, unloaded=versions)


async def _weighted(redis: aioredis.Redis, model: str, versions: list[int]) -> dict[int, int]:
    if not versions:
        return {}
    raw = await redis.hget(keys.weights(), model)
    if not raw:
        return {}
    weights = control.decode_weights(raw)
    return {v: weights.get(v, 0) for v in versions if weights.get(v, 0) > 0}


def _weighted_message(model: str, weighted: dict[int, int]) -> str:
    listing = ", ".join(f"version {v} has weight {w}" for v, w in sorted(weighted.items()))
    return f"cannot unload model '{model}': {listing}; set its weight to 0 first"

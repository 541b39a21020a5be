"""What a load or an unload control message does on this worker, answered with one ack.

A load writes the model files the request sent (if any) into the model directory, reads it
(with the message's config override, if any, auto-completed by the backend), loads the versions
its version_policy selects that are not loaded yet, reloads the loaded ones whose configuration
changed (an override, or the end of one) or whose files the request brought, and retires the
loaded ones it no longer selects. An ensemble is validated and published once the models its
steps use are loaded (Triton loads them with it).
An unload retires the versions named (every loaded one by default). A version
that has weight is never retired: the whole message is refused instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Protocol, cast

import redis.asyncio as aioredis

from shared import model_config
from shared.fleet import control, expected_models, model_registry
from shared.fleet.control import ControlAck, ControlMessage, IndexEntry
from shared.model_config.ensemble_graph import is_ensemble
from shared.storage import model_files, repository
from shared.storage.model_paths import check_model_name
from shared.storage.repositories import Repositories
from shared.storage.repository import RepositoryModel, ScanResult
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend
from workers.loading import auto_complete
from workers.loading.ensemble_load import publish_one, unpublish
from workers.loading.loader import LoadedVersion, VersionLoadError
from workers.loading.placement import Devices, runs_here
from workers.loading.repository_index import entry_for
from workers.loading.start_set import start_set
from workers.settings import WorkerSettings


class ModelHost(Protocol):
    """What fleet control needs from the worker: what it serves, and starting or stopping a
    version (``workers.loading.version_host.VersionHost``)."""

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

    @property
    def repositories(self) -> Repositories: ...

    async def start(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load (all or nothing; ``VersionLoadError``), serve, mark ready, route to them."""
        ...

    async def stop(self, key: tuple[str, int]) -> None:
        """Route around, unmark, drain, stop serving, unload."""
        ...

    async def replace(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Reload served versions with the model's new configuration or files, no downtime."""
        ...


def ack(host: ModelHost, status: str, message: str = "", **kwargs: list[int]) -> ControlAck:
    return ControlAck(worker=host.id, status=status, message=message, **kwargs)


async def load(host: ModelHost, message: ControlMessage, not_loaded: bool = False) -> ControlAck:
    """``not_loaded``: an on_demand placement's load, indexed as not expected (it may end)."""
    name = message.model
    redis = host.redis
    try:
        check_model_name(name)
    except ConchError as exc:
        return ack(host, control.ACK_ERROR, exc.message)
    repositories = host.repositories
    strict = host.settings.strict_model_config
    try:
        await asyncio.to_thread(repositories.refresh, name)
        model_dir = _model_dir(repositories, name, message.files)
        if message.files:
            await write_files(redis, name, model_dir)
        if not model_dir.is_dir():
            return ack(
                host, control.ACK_ERROR, f"no model directory '{name}' in the model repositories"
            )
        override = None
        if message.config is not None:
            override = model_config.from_json(
                message.config,
                source=f"override of {name!r}",
                model_dir=None if strict else model_dir,
            )
        model = repository.read_model(
            model_dir, override, auto_complete=not strict, config_name=repositories.config_name
        )
    except ConchError as exc:
        await control.write_index(redis, {name: IndexEntry(error=exc.message)})
        return ack(host, control.ACK_ERROR, exc.message)
    await control.write_index(redis, {name: entry_for(model, not_loaded)})
    scan = None
    if is_ensemble(model.config):
        # As Triton does, an ensemble loads the models its steps use (with their own steps').
        scan = await asyncio.to_thread(repositories.scan, not strict)
        configs = {n: m.config for n, m in scan.models.items()} | {name: model.config}
        for step_model in sorted(start_set(configs, [name], {}) - {name}):
            if not any(m == step_model for m, _ in host.loaded):
                answer = await load_model(host, scan.models[step_model], scan)
                if answer.status == control.ACK_ERROR:
                    return ack(host, control.ACK_ERROR, f"'{step_model}': {answer.message}")
    return await load_model(host, model, scan, reload_all=message.files)


def _model_dir(repositories: Repositories, name: str, uploading: bool) -> Path:
    """The model's directory in the repositories: the one holding it, or for files sent with
    the load, a new one in the first repository; a name in two repositories is refused.

    The repositories are looked at once: several workers of one host share them, and one may
    create the directory of an upload between two looks of another's."""
    found = repositories.dirs_of(name)
    if len(found) == 1:
        return found[0]
    if found:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"model '{name}' is not unique across all model repositories "
            f"({', '.join(str(path.parent) for path in found)})",
        )
    return repositories.upload_root / name if uploading else repositories.paths[0] / name


async def load_model(
    host: ModelHost,
    model: RepositoryModel,
    scan: ScanResult | None,
    reload_all: bool = False,
    changed: Collection[int] = (),
) -> ControlAck:
    """Bring the model's loaded versions to what its version_policy selects: load the new ones,
    reload those whose configuration changed (every kept one with ``reload_all``, those in
    ``changed``), then retire the ones no longer selected. An ensemble (``scan``: the
    repositories, to check its steps against) is validated and published instead."""
    name, redis = model.name, host.redis
    if is_ensemble(model.config):  # no instance: validated and published for the schedulers
        configs = {n: m.config for n, m in scan.models.items()} if scan else {}
        error = await publish_one(redis, model, configs, host.id)
        if error is not None:
            return ack(host, control.ACK_ERROR, error)
        return ack(host, control.ACK_OK, loaded=model.versions)
    if not host.backend.accepts(model.config):
        return ack(
            host,
            control.ACK_SKIPPED,
            f"backend '{host.settings.backend}' does not serve "
            f"'{model.config.backend or model.config.platform}'",
        )
    if not runs_here(model.config, Devices.of(host.settings)):
        return ack(host, control.ACK_SKIPPED, "no instance of the model on this worker's devices")
    try:
        model = await asyncio.to_thread(
            auto_complete.complete, host.backend, model, host.settings.strict_model_config
        )
    except ConchError as exc:
        await expected_models.record_load_error(redis, name, host.id, exc.message)
        return ack(host, control.ACK_ERROR, exc.message)
    target = set(model.versions)
    if not target:
        reason = (
            f"no version of '{name}' to load: versions on disk "
            f"{model.available_versions or 'none'}, version_policy "
            f"{model.config.version_policy.kind}"
        )
        await expected_models.record_load_error(redis, name, host.id, reason)
        return ack(host, control.ACK_ERROR, reason)
    current = {v for (m, v) in host.loaded if m == name}
    retire = sorted(current - target)
    weighted = await _weighted(redis, name, retire)
    if weighted:
        return ack(host, control.ACK_ERROR, _weighted_message(name, weighted))
    reload = [
        v
        for v in sorted(target & current)
        if reload_all
        or v in changed
        or host.loaded[(name, v)].model.config.json != model.config.json
    ]
    try:
        loaded = await host.start(model, sorted(target - current))
        if reload:
            loaded += await host.replace(model, reload)
    except VersionLoadError as exc:
        await expected_models.record_load_error(redis, name, host.id, str(exc))
        return ack(host, control.ACK_ERROR, str(exc))
    await expected_models.clear_load_errors(redis, [name])
    await asyncio.gather(*(host.stop((name, v)) for v in retire))
    return ack(host, control.ACK_OK, loaded=[lv.version for lv in loaded], unloaded=retire)


async def write_files(redis: aioredis.Redis, model: str, model_dir: Path) -> None:
    """The files the load sent, written into the model directory (confined to it)."""
    raw = cast(
        dict[bytes | str, bytes], await redis.hgetall(keys.control_files(model))
    )  # values: bytes
    files = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
    if not files:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"failed to load '{model}': the model files sent with the load are gone from Redis",
        )
    await asyncio.to_thread(model_files.write, model, model_dir, files)


async def unload(host: ModelHost, message: ControlMessage) -> ControlAck:
    name = message.model
    config = (await model_registry.read_models(host.redis))[1].get(name)
    if config is not None and is_ensemble(config):
        known = await host.redis.smembers(keys.model_versions(name))
        versions = sorted(
            v for v in map(int, known) if message.versions is None or v in message.versions
        )
        await unpublish(host.redis, name, versions)
        return ack(host, control.ACK_OK, unloaded=versions)
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

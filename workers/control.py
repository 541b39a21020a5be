"""A worker's side of fleet-wide model control: load and unload versions while serving.

The worker reads every message of the control stream (``shared.control``) published after it
started, acts on the models its backend serves, and answers each message. Loading starts the new
version's serving tasks and marks it ready only once its instances are loaded and warmed up, so
traffic never reaches a half-loaded version. Unloading drains: the version is marked draining
(gateways stop routing requests without a version to it), then unmarked ready (requests naming
it get 503 at once), then its queued and in-flight batches finish before its instances unload.
A version that has weight is never unloaded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import redis.asyncio as aioredis

from shared import control, keys, model_config, redis_conn, registry, repository, streams
from shared.control import ControlAck, ControlMessage, IndexEntry
from shared.errors import ConchError
from shared.repository import RepositoryModel, ScanResult
from workers.loader import LoadedVersion, load_version

if TYPE_CHECKING:
    from workers.service import WorkerService

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Pinned(RepositoryModel):
    """A repository model whose versions to load are fixed (the policy minus unloaded ones)."""

    pinned: tuple[int, ...] = ()

    @property
    def versions(self) -> list[int]:
        return list(self.pinned)


class ModelControl:
    def __init__(self, service: WorkerService):
        self._service = service
        self._cursor: bytes = b"$"

    @property
    def _redis(self) -> aioredis.Redis:
        return self._service.redis

    # --- start-up -------------------------------------------------------------------------

    async def startup_scan(self, scan: ScanResult) -> ScanResult:
        """Apply the fleet's desired state to what the disk says, and publish the index."""
        self._cursor = await control.last_id(self._redis)
        states = await control.read_states(self._redis)
        index = {name: IndexEntry(error=error) for name, error in scan.errors.items()}
        models: dict[str, RepositoryModel] = {}
        for name, model in scan.models.items():
            index[name] = IndexEntry(versions=model.available_versions)
            state = states.get(name)
            if state is None:
                models[name] = model
                continue
            if state.unloaded:
                log.info(
                    "model left unloaded (unloaded through the repository API)",
                    extra={"model": name},
                )
                continue
            if state.config is not None:
                try:
                    config = model_config.from_json(state.config, source=f"override of {name!r}")
                    model = repository.read_model(model.path, config)
                except ConchError as exc:
                    log.error(
                        "config override unusable; using config.pbtxt",
                        extra={"model": name, "error": exc.message},
                    )
            if state.excluded:
                pinned = tuple(v for v in model.versions if v not in state.excluded)
                model = _Pinned(
                    **{f.name: getattr(model, f.name) for f in dataclasses.fields(RepositoryModel)},
                    pinned=pinned,
                )
            models[name] = model
        await control.write_index(self._redis, index)
        return ScanResult(models=models, errors=scan.errors)

    # --- the control loop -----------------------------------------------------------------

    async def run(self) -> None:
        client: aioredis.Redis = redis_conn.dedicated(
            self._service.settings.redis_url, name="conch-worker-control"
        )
        stream = keys.control_stream()
        try:
            while True:
                try:
                    reply = await client.xread({stream: self._cursor}, count=16, block=1000)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("control stream read failed; retrying")
                    await asyncio.sleep(0.5)
                    continue
                for entry in streams.parse_read(reply):
                    self._cursor = entry.entry_id
                    await self._handle_entry(entry)
        finally:
            await client.aclose()

    async def _handle_entry(self, entry: streams.Entry) -> None:
        try:
            message = control.decode_message(entry.fields[keys.FIELD_DATA])
        except Exception:
            log.exception("undecodable control message skipped")
            return
        started = time.monotonic()
        try:
            ack = await self.handle(message)
        except Exception as exc:
            log.exception("control message failed", extra={"model": message.model})
            ack = self._ack(control.ACK_ERROR, f"{type(exc).__name__}: {exc}")
        log.info(
            "control message handled",
            extra={
                "action": message.action,
                "model": message.model,
                "status": ack.status,
                "detail": ack.message,
                "loaded": ack.loaded,
                "unloaded": ack.unloaded,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        try:
            await control.answer(self._redis, message.id, ack)
        except Exception:
            log.exception("could not answer a control message", extra={"model": message.model})

    def _ack(self, status: str, message: str = "", **kwargs: list[int]) -> ControlAck:
        return ControlAck(worker=self._service.id, status=status, message=message, **kwargs)

    async def handle(self, message: ControlMessage) -> ControlAck:
        wanted = self._service.settings.models
        if wanted and message.model not in wanted:
            return self._ack(control.ACK_SKIPPED, "not among this worker's models")
        if message.action == control.LOAD:
            return await self._load(message)
        if message.action == control.UNLOAD:
            return await self._unload(message)
        return self._ack(control.ACK_ERROR, f"unknown control action '{message.action}'")

    # --- load -----------------------------------------------------------------------------

    async def _load(self, message: ControlMessage) -> ControlAck:
        service = self._service
        name = message.model
        model_dir = Path(service.settings.model_repository) / name
        if not model_dir.is_dir():
            return self._ack(
                control.ACK_ERROR, f"no model directory '{name}' in the model repository"
            )
        try:
            override = None
            if message.config is not None:
                override = model_config.from_json(message.config, source=f"override of {name!r}")
            model = repository.read_model(model_dir, override)
        except ConchError as exc:
            await control.write_index(self._redis, {name: IndexEntry(error=exc.message)})
            return self._ack(control.ACK_ERROR, exc.message)
        await control.write_index(
            self._redis, {name: IndexEntry(versions=model.available_versions)}
        )
        if not service.backend.accepts(model.config):
            return self._ack(
                control.ACK_SKIPPED,
                f"backend '{service.settings.backend}' does not serve "
                f"'{model.config.backend or model.config.platform}'",
            )
        target = set(model.versions)
        if not target:
            return self._ack(
                control.ACK_ERROR,
                f"no version of '{name}' to load: versions on disk "
                f"{model.available_versions or 'none'}, version_policy "
                f"{model.config.version_policy.kind}",
            )
        current = {v for (m, v) in service.loaded if m == name}
        retire = sorted(current - target)
        weighted = await self._weighted(name, retire)
        if weighted:
            return self._ack(control.ACK_ERROR, _weighted_message(name, weighted))
        loaded: list[LoadedVersion] = []
        for version in sorted(target - current):
            log.info("loading model", extra={"model": name, "version": version})
            try:
                loaded.append(
                    await asyncio.to_thread(load_version, service.backend, model, version)
                )
            except Exception as exc:
                text = exc.message if isinstance(exc, ConchError) else f"{exc}"
                for done in loaded:  # all or nothing: the versions loaded so far go too
                    await asyncio.to_thread(_unload_instances, done)
                return self._ack(control.ACK_ERROR, f"version {version} failed to load: {text}")
        await registry.publish_model(self._redis, model.config)
        await streams.ensure_groups(
            self._redis,
            [keys.batch_stream(name, lv.version) for lv in loaded],
            keys.WORKER_GROUP,
        )
        for lv in loaded:
            self._start(lv)
        await registry.heartbeat(
            self._redis, "worker", service.id, service._info(), service.settings.heartbeat_ttl_ms
        )
        await service._mark_ready()
        if loaded:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(keys.draining(), *(f"{name}:{lv.version}" for lv in loaded))
                pipe.incr(keys.policy_rev())
                await pipe.execute()
        await asyncio.gather(*(self._retire((name, v)) for v in retire))
        return self._ack(
            control.ACK_OK,
            loaded=[lv.version for lv in loaded],
            unloaded=retire,
        )

    def _start(self, loaded: LoadedVersion) -> None:
        service = self._service
        key = (loaded.name, loaded.version)
        service.loaded[key] = loaded
        service._reclaimed[key] = asyncio.Queue()
        for index, instance in enumerate(loaded.instances):
            service._serving.append(
                asyncio.create_task(service._serve(loaded, instance, index), name=f"serve-{key}")
            )
        log.info(
            "model loaded",
            extra={
                "model": loaded.name,
                "version": loaded.version,
                "instances": len(loaded.instances),
                "seconds": round(loaded.load_seconds, 3),
            },
        )

    # --- unload ---------------------------------------------------------------------------

    async def _unload(self, message: ControlMessage) -> ControlAck:
        name = message.model
        versions = sorted(
            v
            for (m, v) in self._service.loaded
            if m == name and (message.versions is None or v in message.versions)
        )
        weighted = await self._weighted(name, versions)
        if weighted:
            return self._ack(control.ACK_ERROR, _weighted_message(name, weighted))
        await asyncio.gather(*(self._retire((name, v)) for v in versions))
        return self._ack(control.ACK_OK, unloaded=versions)

    async def _retire(self, key: tuple[str, int]) -> None:
        """Route around, unmark, drain, stop serving, unload: no queued request is lost."""
        service = self._service
        model, version = key
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.draining(), f"{model}:{version}", registry.now_ms())
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await asyncio.sleep(service.settings.drain_route_delay_s)
        loaded = service.loaded.pop(key, None)
        if loaded is None:
            return
        await registry.unmark_ready(self._redis, service.id, [key])
        deadline = time.monotonic() + service.settings.drain_timeout_s
        while time.monotonic() < deadline:
            if await self._drained(loaded):
                break
            await asyncio.sleep(0.05)  # polling Redis: there is no event to wait on
        name = f"serve-{key}"
        tasks = [task for task in service._serving if task.get_name() == name]
        for task in tasks:
            task.cancel()
            service._serving.remove(task)
        await asyncio.gather(*tasks, return_exceptions=True)
        service._reclaimed.pop(key, None)
        await asyncio.to_thread(_unload_instances, loaded)
        log.info("model unloaded", extra={"model": model, "version": version})

    async def _drained(self, loaded: LoadedVersion) -> bool:
        """Nothing queued for the version and no batch of it in flight anywhere."""
        name, version = loaded.name, loaded.version
        batch = keys.batch_stream(name, version)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.xlen(batch)
            pipe.xpending(batch, keys.WORKER_GROUP)
            for level in loaded.model.config.priority_levels():
                pipe.xlen(keys.request_stream(name, version, level))
            results = await pipe.execute(raise_on_error=False)
        pending = results[1]
        in_flight = pending.get("pending", 0) if isinstance(pending, dict) else 0
        queued = sum(x for x in (results[0], *results[2:]) if isinstance(x, int))
        return queued == 0 and in_flight == 0

    async def _weighted(self, model: str, versions: list[int]) -> dict[int, int]:
        if not versions:
            return {}
        raw = await self._redis.hget(keys.weights(), model)
        if not raw:
            return {}
        weights = control.decode_weights(raw)
        return {v: weights.get(v, 0) for v in versions if weights.get(v, 0) > 0}


def _weighted_message(model: str, weighted: dict[int, int]) -> str:
    listing = ", ".join(f"version {v} has weight {w}" for v, w in sorted(weighted.items()))
    return f"cannot unload model '{model}': {listing}; set its weight to 0 first"


def _unload_instances(loaded: LoadedVersion) -> None:
    for instance in loaded.instances:
        try:
            instance.unload()
        except Exception:
            log.exception("unload failed", extra={"model": loaded.name})

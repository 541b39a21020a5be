"""Triton's model repository extension, fleet-wide: index, load, unload.

``load`` and ``unload`` publish one control message (``shared.fleet.control``) that every worker
reads; the call returns once each worker that was live has answered, so when the route answers 200
the version is loaded (or unloaded) across the fleet. A version that has weight is never unloaded:
the call is refused with a message saying to set its weight to 0 first. Unloading drains:
gateways stop routing requests without a version to it, then the workers finish what was queued
for it.

Load and unload are Triton's explicit model control mode (``CONCH_GATEWAY_MODEL_CONTROL_MODE``):
in the other modes they are refused with Triton's error; the index answers in every mode.

The routes that call this are ``gateway.repository.routes``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis

from gateway.core.model_table import ModelTable
from gateway.extensions.response_cache import ResponseCache
from gateway.repository.files import load_request
from gateway.routing.traffic_table import decode_weights
from shared.fleet import (
    change_feed,
    control,
    expected_models,
    heartbeats,
    model_registry,
    on_demand,
    readiness,
)
from shared.fleet.expected_models import LoadError
from shared.runtime import clock
from shared.storage.model_paths import check_model_name
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode, invalid, unavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Where:
    """on_demand mode's additions to the index: loads in progress, and who holds each version."""

    placements: dict[str, on_demand.Placement] | None = None
    workers: dict[tuple[str, int], list[str]] = field(default_factory=dict)


class RepositoryControl:
    """Load and unload across the fleet, from one gateway process."""

    # The response cache, whose entries of a model go when the model is loaded again or unloaded.
    cache: ResponseCache | None = None

    def __init__(
        self,
        r: aioredis.Redis,
        table: ModelTable,
        timeout_s: float,
        max_upload_bytes: int = 64 * 1024 * 1024,
        control_mode: str = control.MODE_EXPLICIT,
    ):
        self._redis = r
        self._explicit = control_mode in control.API_MODES
        self._on_demand = control_mode == control.MODE_ON_DEMAND
        self._table = table
        self._timeout_s = timeout_s
        self._max_upload_bytes = max_upload_bytes

    async def index(self, ready_only: bool) -> list[dict[str, str]]:
        found = await expected_models.read(self._redis)
        disk, states, failed = found.index, found.states, found.load_errors
        _, configs = await model_registry.read_models(self._redis)
        names = sorted(set(disk) | set(configs))
        live = await readiness.ready_versions(self._redis, names)
        where = await self._where(live)
        entries: list[dict[str, str]] = []
        for name in names:
            entry = disk.get(name)
            if entry is not None and entry.error:
                if not ready_only:
                    entries.append({"name": name, "state": "UNAVAILABLE", "reason": entry.error})
                continue
            state = states.get(name)
            versions = set(entry.versions if entry else []) | set(live.get(name, {}))
            if not versions and not ready_only:
                # A published model no repository holds any more (removed, poll mode): unloaded.
                reason = "no version" if entry is not None else "unloaded"
                entries.append({"name": name, "state": "UNAVAILABLE", "reason": reason})
            for version in sorted(versions):
                if live.get(name, {}).get(version, 0) > 0:
                    ready = {"name": name, "version": str(version), "state": "READY"}
                    if where.placements is not None:  # on_demand: where it is loaded
                        ready["reason"] = "loaded on " + ", ".join(where.workers[(name, version)])
                    entries.append(ready)
                elif not ready_only:
                    entries.append(self._not_ready(name, version, entry, state, failed, where))
        return entries

    async def _where(self, live: dict[str, dict[int, int]]) -> _Where:
        if not self._on_demand:
            return _Where()
        pairs = [(m, v) for m, vs in live.items() for v, n in vs.items() if n > 0]
        return _Where(
            await on_demand.read_placements(self._redis),
            await readiness.ready_workers(self._redis, pairs),
        )

    @staticmethod
    def _not_ready(
        name: str,
        version: int,
        entry: control.IndexEntry | None,
        state: control.DesiredState | None,
        failed: dict[str, LoadError],
        where: _Where,
    ) -> dict[str, str]:
        placement = (where.placements or {}).get(name)
        if placement is not None:
            reason = f"loading on {placement.worker}"
            return {"name": name, "version": str(version), "state": "LOADING", "reason": reason}
        reason = _not_ready_reason(entry, state, version)
        if reason.startswith("not loaded") and name in failed:
            reason = f"failed to load: {failed[name].message}"
        return {"name": name, "version": str(version), "state": "UNAVAILABLE", "reason": reason}

    def _check_explicit(self) -> None:
        """Load and unload only in explicit (or on_demand) model control mode: Triton's refusal
        otherwise."""
        if not self._explicit:
            raise unavailable(control.NOT_EXPLICIT)

    async def load(self, model: str, parameters: dict[str, Any]) -> list[int]:
        """Load (or reload) a model on every worker. A ``config`` override or model files
        reload the versions already loaded; files are written into each worker's model
        directory first (``gateway.repository.files`` checks them)."""
        self._check_explicit()
        check_model_name(model)
        request = load_request(model, parameters, self._max_upload_bytes)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.control_files(model))
            if request.files:
                # Mapping's key type is invariant: dict[str, bytes] is a valid Mapping[FieldT, ...].
                pipe.hset(
                    keys.control_files(model), mapping=cast(Mapping[Any, bytes], request.files)
                )
            await pipe.execute()
        message = control.new_message(
            control.LOAD, model, config=request.config, files=bool(request.files)
        )
        acks = await self._send(message)
        _raise_for_errors(acks, "load", model)
        done = [a for a in acks if a.status == control.ACK_OK]
        if not done:
            reasons = sorted({a.message for a in acks if a.message})
            failure = f"failed to load '{model}': no worker serves it" + (
                f" ({'; '.join(reasons)})" if reasons else ""
            )
            await expected_models.record_load_error(self._redis, model, "gateway", failure)
            raise invalid(failure)
        loaded = sorted({v for a in done for v in a.loaded})
        if self.cache is not None:
            await self.cache.invalidate(model)
        log.info("model loaded across the fleet", extra={"model": model, "versions": loaded})
        await self._table.refresh()
        return loaded

    async def unload(self, model: str, parameters: dict[str, Any]) -> list[int]:
        self._check_explicit()
        check_model_name(model)
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise invalid(f"parameter 'unload_dependents' must be a boolean, got {dependents!r}")
        versions = parameters.get("versions")
        if versions is not None and (
            not isinstance(versions, list)
            or not versions
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in versions)
        ):
            raise invalid(
                f"parameter 'versions' must be a list of positive version numbers, got {versions!r}"
            )
        known = await readiness.ready_versions(self._redis, [model])
        if not known.get(model) and not await self._redis.hexists(keys.models(), model):
            raise invalid(f"failed to unload '{model}': no such model is loaded")
        targets = [model]
        if dependents:
            targets += self._dependents(model)
        unloaded: list[int] = []
        for name in targets:
            unloaded += await self._unload_one(name, versions if name == model else None)
        await self._table.refresh()
        return unloaded

    async def _unload_one(self, model: str, versions: list[int] | None) -> list[int]:
        raw = await self._redis.hget(keys.weights(), model)
        weights = {int(v): w for v, w in decode_weights(raw).items()} if raw else {}
        weighted = {
            v: w for v, w in weights.items() if w > 0 and (versions is None or v in versions)
        }
        if weighted:
            listing = ", ".join(f"version {v} has weight {w}" for v, w in sorted(weighted.items()))
            raise invalid(
                f"cannot unload model '{model}': {listing}; set its weight to 0 first "
                f"(PUT /v2/admin/models/{model}/weights, or conch admin weights set)"
            )
        message = control.new_message(control.UNLOAD, model, versions=versions)
        acks = await self._send(message)
        _raise_for_errors(acks, "unload", model)
        unloaded = sorted({v for a in acks for v in a.unloaded})
        await self._forget(model, unloaded, weights)
        if self.cache is not None and unloaded:
            await self.cache.invalidate(model)
        log.info("model unloaded across the fleet", extra={"model": model, "versions": unloaded})
        return unloaded

    async def _forget(self, model: str, versions: list[int], weights: dict[int, int]) -> None:
        """Versions no live worker serves any more leave the version set and the weights."""
        now = clock.now_ms()
        async with self._redis.pipeline(transaction=False) as pipe:
            for version in versions:
                pipe.zcount(keys.ready(model, version), now, "+inf")
            counts = await pipe.execute()
        gone = [v for v, count in zip(versions, counts, strict=True) if count == 0]
        if not gone:
            return
        kept = {str(v): w for v, w in weights.items() if v not in gone}
        # The version set lives in the model's slot, the policy keys in {policy}'s: two
        # commands (a retry of either is harmless), the policy ones atomic among themselves.
        await self._redis.srem(keys.model_versions(model), *gone)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.draining(), *(f"{model}:{v}" for v in gone))
            if weights and kept != {str(v): w for v, w in weights.items()}:
                if any(kept.values()):
                    pipe.hset(keys.weights(), model, msgspec.json.encode(kept))
                else:
                    pipe.hdel(keys.weights(), model)
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await change_feed.announce(self._redis, change_feed.POLICY, change_feed.MODELS)

    def _dependents(self, model: str) -> list[str]:
        """Ensembles with a step that uses the model."""
        found = []
        for name, config in self._table.configs.items():
            steps = (config.ensemble_scheduling or {}).get("step", [])
            if any(step.get("model_name") == model for step in steps):
                found.append(name)
        return sorted(found)

    async def _send(self, message: control.ControlMessage) -> list[control.ControlAck]:
        workers = await heartbeats.live_ids(self._redis, "worker")
        if not workers:
            raise unavailable(
                f"no live worker to {message.action} model '{message.model}'; start a worker"
            )
        await control.publish(self._redis, message)
        acks, missing = await control.collect(self._redis, message.id, workers, self._timeout_s)
        if missing:
            raise ConchError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"{message.action} of model '{message.model}' is still running on "
                f"{len(missing)} worker(s) after {self._timeout_s:g} s: "
                f"{', '.join(sorted(missing))}",
            )
        return acks


def _not_ready_reason(
    entry: control.IndexEntry | None, state: control.DesiredState | None, version: int
) -> str:
    """Why a version in the index is not READY: unloaded (through the API, or gone from the
    repositories), not loaded (explicit mode, never asked for), or no live worker has it."""
    if entry is None or (state is not None and (state.unloaded or version in state.excluded)):
        return "unloaded"
    if state is None and entry.not_loaded:
        return "not loaded"
    return "not loaded by any live worker"


def _raise_for_errors(acks: list[control.ControlAck], action: str, model: str) -> None:
    failed = [a for a in acks if a.status == control.ACK_ERROR]
    if failed:
        raise invalid(
            f"failed to {action} '{model}': "
            + "; ".join(f"{a.message} (worker {a.worker})" for a in failed)
        )

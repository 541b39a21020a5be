"""The models a mesh is expected to serve: what strict readiness waits for.

Triton's server is ready when every model it was told to load is ready; a model that failed to
load does not hold it back (it is reported, and ``--exit-on-error`` stops the server). A mesh has
no single process that knows its models, so the expectation is kept in Redis by those who do:

- the workers write the repository index (``keys.repository_index``) when they start: every model
  directory on disk, whatever its backend, with an error for one that cannot be read or that no
  Conch backend serves; then they mark the index written (``keys.repository_scanned``). The
  first worker to start tells the gateways about the models of every other backend too, so a
  model whose worker starts later is expected (and reported as loading) from the start;
- the repository API's load and unload change the fleet's desired state
  (``keys.control_state``): a model unloaded everywhere is no longer expected, one loaded is;
- in explicit model control mode, a model the workers did not load at start is in the index
  marked ``not_loaded``: not expected until the API loads it;
- in poll mode the workers write the index again when the repositories change: a model removed
  from them stops being expected;
- a worker whose load of a model fails records why (``keys.load_errors``); a later load that
  succeeds, or a new load request, clears it.

Expected = on disk and servable, loaded (at start or through the API), not failed. The pure
functions here decide; the gateway's model table reads the keys on every refresh.
"""

from __future__ import annotations

import msgspec
import redis.asyncio as aioredis

from shared.fleet import change_feed
from shared.fleet.control import DesiredState, IndexEntry, decode_index, decode_state
from shared.runtime import clock
from shared.wire import keys


class LoadError(msgspec.Struct, frozen=True, kw_only=True):
    worker: str
    message: str
    ms: int = 0


class Expectations(msgspec.Struct, frozen=True, kw_only=True):
    """One read of everything that decides which models a gateway waits for."""

    scanned: bool = False
    index: dict[str, IndexEntry] = {}
    states: dict[str, DesiredState] = {}
    load_errors: dict[str, LoadError] = {}


_decode_error = msgspec.json.Decoder(LoadError).decode
_encode = msgspec.json.encode


def expected(found: Expectations) -> set[str]:
    """The models the mesh must have ready before it is ready (pure)."""
    wanted: set[str] = set()
    for name, entry in found.index.items():
        if entry.error or name in found.load_errors:
            continue
        state = found.states.get(name)
        if state is None and entry.not_loaded:  # explicit mode: not loaded at start
            continue
        if state is not None and state.unloaded:
            continue
        if state is not None and entry.versions and set(entry.versions) <= set(state.excluded):
            continue
        wanted.add(name)
    return wanted


def not_ready(wanted: set[str], ready: set[str]) -> list[str]:
    """The expected models without a ready version, sorted (pure)."""
    return sorted(wanted - ready)


def loading(found: Expectations, name: str) -> bool:
    """Whether ``name`` is expected but not ready: answered 'not ready', never 'unknown'."""
    return name in expected(found)


async def read(r: aioredis.Redis) -> Expectations:
    async with r.pipeline(transaction=False) as pipe:
        pipe.exists(keys.repository_scanned())
        pipe.hgetall(keys.repository_index())
        pipe.hgetall(keys.control_state())
        pipe.hgetall(keys.load_errors())
        scanned, index, states, errors = await pipe.execute()
    return Expectations(
        scanned=bool(scanned),
        index={_text(k): decode_index(v) for k, v in index.items()},
        states={_text(k): decode_state(v) for k, v in states.items()},
        load_errors={_text(k): _decode_error(v) for k, v in errors.items()},
    )


async def read_one(r: aioredis.Redis, model: str) -> tuple[Expectations, bool]:
    """What decides whether ``model`` is expected, and whether its config is published."""
    async with r.pipeline(transaction=False) as pipe:
        pipe.exists(keys.repository_scanned())
        pipe.hget(keys.repository_index(), model)
        pipe.hget(keys.control_state(), model)
        pipe.hget(keys.load_errors(), model)
        pipe.hexists(keys.models(), model)
        scanned, entry, state, error, published = await pipe.execute()
    found = Expectations(
        scanned=bool(scanned),
        index={model: decode_index(entry)} if entry else {},
        states={model: decode_state(state)} if state else {},
        load_errors={model: _decode_error(error)} if error else {},
    )
    return found, bool(published)


async def write_index(r: aioredis.Redis, entries: dict[str, IndexEntry]) -> None:
    """Replace the repository index with a whole scan, then mark the index written.

    A replacement rather than a merge: a model directory removed from disk stops being expected
    once a worker has scanned the repository again.
    """
    async with r.pipeline(transaction=True) as pipe:
        pipe.delete(keys.repository_index())
        if entries:
            pipe.hset(keys.repository_index(), mapping={k: _encode(v) for k, v in entries.items()})
        await pipe.execute()
    await r.set(keys.repository_scanned(), clock.now_ms())
    await change_feed.announce(r, change_feed.MODELS)


async def record_load_error(r: aioredis.Redis, model: str, worker: str, message: str) -> None:
    error = LoadError(worker=worker, message=message, ms=clock.now_ms())
    await r.hset(keys.load_errors(), model, _encode(error))
    await change_feed.announce(r, change_feed.MODELS)


async def clear_load_errors(r: aioredis.Redis, models: list[str]) -> None:
    if models:
        await r.hdel(keys.load_errors(), *models)
        await change_feed.announce(r, change_feed.MODELS)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

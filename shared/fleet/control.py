"""Fleet-wide model control: Triton's model repository extension across every worker.

A gateway that receives ``load`` or ``unload`` publishes one :class:`ControlMessage` on the
control stream. Every worker reads the whole stream (plain XREAD with its own cursor, no consumer
group: each message is for all of them), acts on the models its backend serves, and answers with
one :class:`ControlAck` on the message's ack list. The gateway waits for an answer from each
worker that was live when it published, so the HTTP call returns once the fleet has acted.

The outcome is also kept as a desired state per model (config override, unloaded versions), so
that a worker started later loads what the fleet serves rather than what the disk says.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, cast

import msgspec
import redis.asyncio as aioredis

from shared.fleet import change_feed, heartbeats
from shared.runtime import clock
from shared.wire import keys

LOAD = "load"
UNLOAD = "unload"

# Triton's --model-control-mode: "none" loads every model at start and refuses the repository
# API's load and unload; "poll" does too, and follows the repositories as they change;
# "explicit" loads what CONCH_WORKER_LOAD_MODELS names at start, then what the API asks.
MODE_NONE = "none"
MODE_POLL = "poll"
MODE_EXPLICIT = "explicit"
# Conch's own: every model indexed at start, none loaded but ``--load-model`` (pinned); a model
# loads on one worker when first asked for, and the placer (``scheduler.placement``) moves copies
# with traffic and memory (docs/many-models.md). The repository API works as in explicit mode.
MODE_ON_DEMAND = "on_demand"
MODES = (MODE_NONE, MODE_POLL, MODE_EXPLICIT, MODE_ON_DEMAND)
# The modes in which the repository API may load and unload.
API_MODES = (MODE_EXPLICIT, MODE_ON_DEMAND)
# Triton's refusal of load and unload outside explicit mode (UNAVAILABLE: HTTP 503), word for
# word: clients match on it.
NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"

ACK_OK = "ok"
ACK_ERROR = "error"
ACK_SKIPPED = "skipped"

# Control messages kept on the stream (a worker only reads those published after it started).
STREAM_MAXLEN = 1000
ACK_TTL_S = 300


class ControlMessage(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    action: str  # LOAD | UNLOAD
    model: str
    # Triton's JSON form of a configuration that replaces config.pbtxt (load only).
    config: dict[str, Any] | None = None
    # Unload only these versions (a Conch extension); None: every version of the model.
    versions: list[int] | None = None
    sent_ms: int = 0
    # Load only: model files came with the request (``keys.control_files``), to be written into
    # the model directory before loading.
    files: bool = False
    # The one worker meant (the placer's loads and unloads in on_demand mode); "": every worker.
    # A worker skips a message meant for another without answering it.
    target: str = ""
    # Why the placer sent it (``shared.fleet.on_demand``'s reasons), for metrics and logs.
    reason: str = ""


class ControlAck(msgspec.Struct, frozen=True, kw_only=True):
    worker: str
    status: str  # ACK_OK | ACK_ERROR | ACK_SKIPPED
    message: str = ""
    loaded: list[int] = []
    unloaded: list[int] = []


class DesiredState(msgspec.Struct, kw_only=True):
    """What the fleet was last told about one model."""

    config: dict[str, Any] | None = None
    unloaded: bool = False
    excluded: list[int] = []
    # The last load came with model files (kept in ``keys.control_files``).
    files: bool = False


class IndexEntry(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker found on disk for one model directory."""

    versions: list[int] = []
    error: str = ""
    # Explicit mode: not among the models loaded at start (and never loaded through the API
    # since): in the index, not expected.
    not_loaded: bool = False
    # The backend that serves it (``backend`` of its completed config, e.g. "onnxruntime", or a
    # Python-based backend's name) and its files' size on disk: what the on_demand placer needs
    # to place a model that was never loaded.
    backend: str = ""
    files_bytes: int = 0


def check_mode(value: str, setting: str) -> str:
    """A model control mode as Triton reads it (any case), or ValueError naming the setting."""
    mode = value.strip().lower()
    if mode not in MODES:
        raise ValueError(
            f"{setting} is '{value}'; expected one of {', '.join(MODES)} "
            "(Triton's --model-control-mode)"
        )
    return mode


_json_encode = msgspec.json.encode
decode_message = msgspec.json.Decoder(ControlMessage).decode
decode_ack = msgspec.json.Decoder(ControlAck).decode
decode_state = msgspec.json.Decoder(DesiredState).decode
decode_index = msgspec.json.Decoder(IndexEntry).decode


def new_message(
    action: str,
    model: str,
    *,
    config: dict[str, Any] | None = None,
    versions: list[int] | None = None,
    files: bool = False,
    target: str = "",
    reason: str = "",
) -> ControlMessage:
    return ControlMessage(
        id=uuid.uuid4().hex,
        action=action,
        model=model,
        config=config,
        versions=versions,
        sent_ms=clock.now_ms(),
        files=files,
        target=target,
        reason=reason,
    )


def next_state(state: DesiredState | None, message: ControlMessage) -> DesiredState:
    """The desired state after a message (pure): a load resets, an unload adds exclusions."""
    if message.action == LOAD:
        return DesiredState(config=message.config, files=message.files)
    state = state or DesiredState()
    if message.versions is None:
        return DesiredState(config=state.config, unloaded=True, excluded=[], files=state.files)
    excluded = sorted(set(state.excluded) | set(message.versions))
    return DesiredState(
        config=state.config, unloaded=state.unloaded, excluded=excluded, files=state.files
    )


async def read_states(r: aioredis.Redis) -> dict[str, DesiredState]:
    raw = await r.hgetall(keys.control_state())
    return {_text(k): decode_state(v) for k, v in raw.items()}


async def publish(r: aioredis.Redis, message: ControlMessage) -> None:
    """Record the desired state and send the message to every worker, in one transaction.

    A load also forgets the model's last load failure (``shared.fleet.expected_models``)."""
    current = await r.hget(keys.control_state(), message.model)
    state = next_state(decode_state(current) if current else None, message)
    async with r.pipeline(transaction=True) as pipe:
        pipe.hset(keys.control_state(), message.model, _json_encode(state))
        if message.action == LOAD:  # a new attempt: expected (loading) until it is done
            pipe.hdel(keys.load_errors(), message.model)
        pipe.xadd(
            keys.control_stream(),
            {keys.FIELD_DATA: _json_encode(message)},
            maxlen=STREAM_MAXLEN,
            approximate=True,
        )
        await pipe.execute()
    await change_feed.announce(r, change_feed.MODELS)


async def send(r: aioredis.Redis, message: ControlMessage) -> None:
    """Send a message meant for one worker (``target``): the fleet's desired state is not
    touched (a placement is not what every worker should load)."""
    await r.xadd(
        keys.control_stream(),
        {keys.FIELD_DATA: _json_encode(message)},
        maxlen=STREAM_MAXLEN,
        approximate=True,
    )


async def last_id(r: aioredis.Redis) -> bytes:
    """The id of the newest control message (a new reader starts after it)."""
    newest = await r.xrevrange(keys.control_stream(), count=1)
    return cast(bytes, newest[0][0]) if newest else b"0-0"  # decode_responses=False: ids are bytes


async def answer(r: aioredis.Redis, message_id: str, ack: ControlAck) -> None:
    key = keys.control_acks(message_id)
    async with r.pipeline(transaction=False) as pipe:
        pipe.rpush(key, _json_encode(ack))
        pipe.expire(key, ACK_TTL_S)
        await pipe.execute()


async def collect(
    r: aioredis.Redis, message_id: str, expected: set[str], timeout_s: float
) -> tuple[list[ControlAck], set[str]]:
    """Wait for an answer from each expected worker; a worker that dies meanwhile is not waited
    for. Returns the answers and the workers that did not answer in time."""
    key = keys.control_acks(message_id)
    acks: list[ControlAck] = []
    waiting = set(expected)
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        raw = cast(list[bytes] | None, await r.lpop(key, 64))  # LPOP with a count: a list
        if raw:
            for item in raw:
                ack = decode_ack(item)
                acks.append(ack)
                waiting.discard(ack.worker)
            continue
        waiting &= await heartbeats.live_ids(r, "worker")
        if waiting:
            await asyncio.sleep(0.05)
    await r.delete(key)
    return acks, waiting


async def write_index(r: aioredis.Redis, entries: dict[str, IndexEntry]) -> None:
    if entries:
        await r.hset(
            keys.repository_index(), mapping={k: _json_encode(v) for k, v in entries.items()}
        )


async def read_index(r: aioredis.Redis) -> dict[str, IndexEntry]:
    raw = await r.hgetall(keys.repository_index())
    return {_text(k): decode_index(v) for k, v in raw.items()}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


_weights_decoder = msgspec.json.Decoder(dict[str, int])


def decode_weights(raw: bytes | str) -> dict[int, int]:
    """A model's stored version weights (``shared.wire.keys.weights``), by version number."""
    return {int(v): w for v, w in _weights_decoder.decode(raw).items()}

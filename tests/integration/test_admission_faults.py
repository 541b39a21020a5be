"""Admission under faults (issue 12, defects 4 and 10), through a real gateway process state:
a late heartbeat queues the request instead of refusing it, and an admission that redis-py
sends twice (its connection dropped after the command went out) queues the request once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from gateway.core.request import ParsedRequest
from gateway.rest.codec import parse_infer_request
from gateway.runtime.state import GatewayState
from gateway.settings import GatewaySettings
from shared.fleet import model_registry, readiness
from shared.model_config import parse_pbtxt
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode
from tests.tcp_proxy import TcpProxy

MODEL = "admitted"
STREAM = keys.request_stream(MODEL, 1, 1)
# Nothing is queued or in flight, so admission sends the request direct
# (``shared.fleet.direct_path``): it lands on the batch stream; either way it must be there exactly
# once.
BATCHES = keys.batch_stream(MODEL, 1)
CONFIG = parse_pbtxt(
    f"""
    name: "{MODEL}"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
    """
)


def request() -> ParsedRequest:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", "data": [1] * 4}]}
    return parse_infer_request(msgspec.json.encode(body), None)


@pytest.fixture
def proxy(redis_server: PrivateRedis, redis_url: str) -> Iterator[TcpProxy]:
    with TcpProxy.to_redis(redis_server) as running:
        yield running


@pytest.fixture
async def gateway(proxy: TcpProxy, aredis: aioredis.Redis) -> AsyncIterator[GatewayState]:
    await model_registry.publish_model(aredis, CONFIG)
    await readiness.mark_ready(aredis, "worker-1", {(MODEL, 1): 1}, ttl_ms=60_000)
    state = GatewayState(GatewaySettings(redis_url=proxy.url(), default_timeout_ms=600))
    await state.start()
    yield state
    await asyncio.wait_for(state.stop(), 20)


async def test_a_late_heartbeat_queues_the_request(
    gateway: GatewayState, aredis: aioredis.Redis
) -> None:
    """The worker's readiness expired a second ago (a starved machine): the request is queued and
    its deadline decides. Before: 503 "no live worker" at once, while the worker was alive."""
    await readiness.mark_ready(aredis, "worker-1", {(MODEL, 1): 1}, ttl_ms=1)
    await asyncio.sleep(0.05)
    with pytest.raises(ConchError) as raised:
        await gateway.dataplane.infer(MODEL, None, request())
    assert raised.value.code == ErrorCode.DEADLINE_EXCEEDED, raised.value.message
    assert await aredis.xlen(STREAM) + await aredis.xlen(BATCHES) == 1


async def test_an_admission_sent_twice_queues_the_request_once(
    gateway: GatewayState, proxy: TcpProxy, aredis: aioredis.Redis
) -> None:
    """The connection drops after the admission script went out and before its answer came
    back; redis-py sends the pipeline again. Before: the request was queued twice."""
    proxy.cut_after(b"EVALSHA")
    with pytest.raises(ConchError) as raised:  # no worker answers: the deadline passes
        await gateway.dataplane.infer(MODEL, None, request())
    assert raised.value.code == ErrorCode.DEADLINE_EXCEEDED, raised.value.message
    assert proxy.cuts == 1
    assert await aredis.xlen(STREAM) + await aredis.xlen(BATCHES) == 1

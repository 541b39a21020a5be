"""Every Redis call has a bound (issue 12, defect 5): a connection that went half-open is given
up and replaced within seconds, and the gateway's enqueue runs inside the request's deadline.

The Redis in these tests sits behind a TCP proxy that can stall its connections: the socket
stays open, nothing comes back (a peer gone without a FIN, a frozen Redis).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import msgspec
import pytest
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from gateway.rest.codec import parse_infer_request
from gateway.runtime.state import GatewayState
from gateway.settings import GatewaySettings
from shared.fleet import model_registry, readiness
from shared.fleet.replies import ReplyRouter
from shared.model_config import parse_pbtxt
from shared.wire import envelope, keys
from shared.wire.errors import ConchError
from tests.tcp_proxy import TcpProxy
from tests.waiting import until

MODEL = "bounded"
CONFIG = parse_pbtxt(
    f"""
    name: "{MODEL}"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }} ]
    """
)


@pytest.fixture
def proxy(redis_server: PrivateRedis, redis_url: str) -> Iterator[TcpProxy]:
    with TcpProxy.to_redis(redis_server) as running:
        yield running


async def test_the_reply_reader_replaces_a_half_open_connection_in_seconds(
    proxy: TcpProxy, aredis: aioredis.Redis
) -> None:
    router = ReplyRouter(proxy.url(), "half-open")
    reader = asyncio.create_task(router.run())
    try:
        future = router.expect("r1")
        assert await until(lambda: proxy.connections >= 1, 5)
        await asyncio.sleep(0.3)  # the reader is inside its blocking XREAD
        assert proxy.stall_existing() == 1
        reply = envelope.error_reply("r1", MODEL, 1, "INTERNAL", "late but delivered")
        await aredis.xadd(router.stream, {keys.FIELD_DATA: envelope.encode([reply])})
        # Before: the reader waited on the dead socket for TCP keepalive (hours by default).
        got = await asyncio.wait_for(future, 15)
        assert got.error == "late but delivered"
        assert proxy.connections >= 2  # a new connection took over
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def test_enqueue_on_a_stalled_redis_is_answered_within_the_deadline(
    proxy: TcpProxy, aredis: aioredis.Redis
) -> None:
    await model_registry.publish_model(aredis, CONFIG)
    await readiness.mark_ready(aredis, "worker-1", {(MODEL, 1): 1}, ttl_ms=60_000)
    settings = GatewaySettings(redis_url=proxy.url(), default_timeout_ms=1_000)
    state = GatewayState(settings)
    await state.start()
    try:
        body = msgspec.json.encode(
            {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "INT32", "data": [1] * 4}]}
        )
        parsed = parse_infer_request(body, None)
        proxy.stall_all()
        started = time.monotonic()
        with pytest.raises(ConchError) as raised:
            await asyncio.wait_for(state.dataplane.infer(MODEL, None, parsed), 30)
        took = time.monotonic() - started
        print(f"answered in {took:.2f} s: {raised.value!r}")
        # Before: the enqueue waited outside the deadline for as long as the socket stayed open.
        assert took < 4.0, f"answered after {took:.1f} s; the deadline was 1 s"
        assert raised.value.code.value in {"DEADLINE_EXCEEDED", "UNAVAILABLE"}
    finally:
        proxy.stall_all(False)
        await asyncio.wait_for(state.stop(), 20)

"""Heartbeats whose replies are read at the next beat, against a real redis-server.

A beat is sent and its replies read one period later, in the wake that sends the next one
(``shared.runtime.deferred_replies``): the registry must still be refreshed every period, a failed
beat must still be counted, and whoever takes the heartbeat's lock, or stops the beating, must find
every beat already landed (a late beat after a deregistration would resurrect the service).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio as aioredis

from conch.private_redis import PrivateRedis
from gateway.runtime import heartbeat as gateway_heartbeat
from shared.fleet import heartbeats, readiness
from shared.fleet.heartbeat_thread import HeartbeatThread
from shared.runtime import redis_conn
from shared.runtime.clock import now_ms
from shared.runtime.deferred_replies import DeferredPipeline, commands_of
from shared.wire import keys
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually, until_sync

TTL_MS = 3_000  # the contract's TTL
INTERVAL_MS = 200  # beats much more often than the contract's 1 s, so the test is short


def test_a_beat_is_read_at_the_next_one_and_errors_surface_there(redis_url: str) -> None:
    client = redis_conn.sync_client(redis_url, name="test-deferred", single_connection=False)
    deferred = DeferredPipeline(client.connection_pool.make_connection())
    check = redis.Redis.from_url(redis_url)
    try:
        check.delete("dr:int", "dr:str")
        check.set("dr:str", "x")
        pipe = client.pipeline(transaction=False)
        pipe.incr("dr:int")
        pipe.incr("dr:str")  # a wrong-type error, in the middle of the beat
        pipe.incr("dr:int")
        deferred.send(commands_of(pipe))
        assert deferred.pending == 3
        # all three replies buffered: settle cannot block
        assert until_sync(deferred.replies_ready, 10), "not within the bound"
        with pytest.raises(redis.ResponseError):
            deferred.settle()
        assert deferred.pending == 0
        assert check.get("dr:int") == b"2"  # the beat landed around its error
        # The connection stays in step: the next beat's replies are its own.
        pipe = client.pipeline(transaction=False)
        pipe.incr("dr:int")
        deferred.send(commands_of(pipe))
        with pytest.raises(RuntimeError):
            deferred.send(commands_of(pipe))  # never two beats in flight
        assert deferred.settle() is True
        assert deferred.settle() is False  # nothing in flight
        assert check.get("dr:int") == b"3"
    finally:
        deferred.close()
        check.close()


def test_a_stalled_beat_is_not_ready_and_asking_does_not_block(
    redis_server: PrivateRedis,
) -> None:
    """The gateway asks on its event loop whether a beat's replies are in; asking must answer at
    once. redis-py's socket has a timeout, and Python waits up to that timeout for data before a
    recv even with MSG_DONTWAIT: the question froze the loop for 5 s, then answered yes, and the
    read that followed froze it 5 s more (a request with a 1 s deadline answered after 11 s)."""
    with TcpProxy.to_redis(redis_server) as proxy:
        client = redis_conn.sync_client(proxy.url(), name="test-stalled", single_connection=False)
        deferred = DeferredPipeline(client.connection_pool.make_connection())
        try:
            deferred.connect()
            proxy.stall_all()
            pipe = client.pipeline(transaction=False)
            pipe.incr("dr:stalled")
            deferred.send(commands_of(pipe))
            started = time.monotonic()
            ready = deferred.replies_ready()
            took = time.monotonic() - started
            assert ready is False
            assert took < 0.5, f"asking took {took:.2f} s"
        finally:
            deferred.close()


def _delayed(tcp_url: str, tmp_path: Path, delay_ms: int) -> str:
    """The same server behind a forwarder that delays every chunk ``delay_ms`` each way."""
    parts = urlsplit(tcp_url)
    assert parts.scheme == "redis" and parts.port, tcp_url
    delay_file = tmp_path / "delay"
    delay_file.write_text(str(delay_ms))
    proxy = TcpProxy(str(parts.hostname), parts.port, delay_file=delay_file).start()
    url = urlunsplit(parts._replace(netloc=f"{proxy.host}:{proxy.port}"))
    assert until_sync(lambda: _answers(url), 10), "not within the bound"
    return url


def _answers(url: str) -> bool:
    with contextlib.suppress(redis.ConnectionError), redis.Redis.from_url(url) as client:
        return bool(client.ping())
    return False


def test_the_thread_refreshes_the_registry_and_its_lock_means_landed(
    redis_url: str, redis_server: PrivateRedis, tmp_path: Path
) -> None:
    """Beats cross a 150 ms hop each way (on the heartbeat's side only): a beat that has just
    been sent has not reached Redis yet, and the lock must wait until it has."""
    check = redis.Redis.from_url(redis_url)
    marks: list[int] = []

    def extra(pipe: object) -> None:
        marks.append(1)
        pipe.incr("dr:thread-beats")  # type: ignore[attr-defined]

    check.delete("dr:thread-beats")
    thread = HeartbeatThread(
        _delayed(redis_server.tcp_url, tmp_path, 150), "scheduler", "deferred-s", ttl_ms=TTL_MS,
        interval_ms=INTERVAL_MS * 3, info=lambda: {"pid": "1"}, extra=extra,
    )  # fmt: skip
    thread.start()
    try:
        registry = keys.service_registry("scheduler")
        assert until_sync(lambda: thread.beats >= 2, 10), "not within the bound"
        first = check.zscore(registry, "deferred-s")
        assert until_sync(lambda: (check.zscore(registry, "deferred-s") or 0) > (first or 0), 10), (
            "not within the bound"
        )
        expiry = check.zscore(registry, "deferred-s")
        assert expiry is not None and expiry > now_ms()  # live, refreshed beat after beat
        for _ in range(2):
            sent = len(marks)
            # a beat just went out
            assert until_sync(lambda sent=sent: len(marks) > sent, 10), "not within the bound"
            with thread.lock:  # what a service stopping an announcement takes
                # Every beat computed so far has landed: Redis counted each one sent.
                assert int(check.get("dr:thread-beats") or 0) == len(marks)
    finally:
        thread.stop()
    # Stopped: its last beat landed before stop returned, so a deregistration stays.
    check.zrem(keys.service_registry("scheduler"), "deferred-s")
    assert int(check.get("dr:thread-beats") or 0) == len(marks)
    time.sleep(3 * INTERVAL_MS / 1000)
    assert check.zscore(keys.service_registry("scheduler"), "deferred-s") is None
    check.close()


def test_the_thread_counts_a_failed_beat_and_beats_again(redis_url: str) -> None:
    check = redis.Redis.from_url(redis_url)
    check.delete("dr:not-a-hash")
    check.set("dr:not-a-hash", "x")
    calls: list[int] = []

    def extra(pipe: object) -> None:
        calls.append(1)
        if len(calls) == 2:  # the second beat meets an error
            pipe.hset("dr:not-a-hash", "f", "v")  # type: ignore[attr-defined]

    thread = HeartbeatThread(
        redis_url, "worker", "deferred-w", ttl_ms=TTL_MS, interval_ms=INTERVAL_MS,
        info=lambda: {}, extra=extra,
    )  # fmt: skip
    thread.start()
    try:
        assert until_sync(lambda: len(calls) >= 5, 10), "not within the bound"
        with thread.lock:
            # Every beat but the failed one landed (and was counted as landed).
            assert thread.beats == len(calls) - 1
        assert (check.zscore(keys.service_registry("worker"), "deferred-w") or 0) > now_ms()
    finally:
        thread.stop()
        check.close()


async def test_the_gateway_beats_every_period_and_lands_its_last_beat(
    redis_url: str, redis_server: PrivateRedis, aredis: aioredis.Redis, tmp_path: Path
) -> None:
    """Beats cross a 150 ms hop each way, 200 ms apart: most of the time one is in flight, and
    stopping must wait for it before the process deregisters."""
    registry = keys.service_registry("gateway")
    url = _delayed(redis_server.tcp_url, tmp_path, 150)
    task = asyncio.create_task(
        gateway_heartbeat.beat_forever(
            url, aredis, "deferred-gw", {"port": "1"}, TTL_MS, INTERVAL_MS / 1000
        )
    )
    try:
        seen: list[float] = []

        async def distinct_beats() -> int:  # the expiry moves on with every beat
            score = await aredis.zscore(registry, "deferred-gw")
            if score is not None:
                seen.append(score)
            return len(set(seen))

        assert await eventually(distinct_beats, lambda n: n >= 4, 10, every=0.05) >= 4, seen
        assert seen[-1] > now_ms()
        assert await aredis.hget(keys.service_info("gateway", "deferred-gw"), "port") == b"1"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    # Cancelled: the beat in flight landed first, so the deregistration is the last word.
    await heartbeats.deregister(aredis, "gateway", "deferred-gw")
    await asyncio.sleep(0.5)  # longer than the hop
    assert await aredis.zscore(registry, "deferred-gw") is None


def test_a_workers_beats_keep_its_versions_ready(redis_url: str) -> None:
    """The worker's heartbeat (registry and readiness marks in one pipeline, replies read a
    period later) refreshes the readiness set every period of the contract (1 s)."""
    check = redis.Redis.from_url(redis_url)
    ready_key = keys.ready("deferred-model", 1)
    thread = HeartbeatThread(
        redis_url, "worker", "deferred-ready", ttl_ms=TTL_MS, interval_ms=1_000, info=lambda: {},
        extra=lambda pipe: readiness.queue_ready(
            pipe, "deferred-ready", {("deferred-model", 1): 2}, TTL_MS
        ),
    )  # fmt: skip
    thread.start()
    try:
        seen: set[float] = set()

        def advanced() -> bool:
            seen.add(check.zscore(ready_key, "deferred-ready") or 0)
            return len(seen) >= 4  # three refreshes after the first

        assert until_sync(advanced, 10), "not within the bound"
        assert max(seen) > now_ms()  # ready: its mark expires in the future
        assert check.hget(keys.instances("deferred-model", 1), "deferred-ready") == b"2"
    finally:
        thread.stop()
        check.close()

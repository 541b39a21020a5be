"""A 5xx never shows exception text (issue 12, defect 12): the gateway logs the exception with
the request id and answers with the id only, on every path (the inference fast path, Litestar's
routes, gRPC). And a stopping gateway drains for as long as a request may run (defect 6).

The gateway here is the real application on a real Redis; the fault is injected by making the
data plane raise, as a bug would."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import msgspec
import pytest
from litestar import get
from litestar.testing import create_test_client

from gateway.errors import EXCEPTION_HANDLERS
from gateway.rest.app import create_app
from gateway.runtime.state import GatewayState
from gateway.settings import GatewaySettings, graceful_shutdown_s
from shared.fleet import model_registry
from shared.model_config import parse_pbtxt

SECRET = "password=hunter2 at /srv/secret/path"
CONFIG = parse_pbtxt(
    """
    name: "buggy"
    platform: "onnxruntime_onnx"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
    """
)
BODY = msgspec.json.encode(
    {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
)


async def _broken(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(SECRET)


def _check(status: int, text: str, caplog: pytest.LogCaptureFixture) -> None:
    assert status == 500
    message = msgspec.json.decode(text)["error"]
    assert SECRET not in message and "RuntimeError" not in message
    request_id = re.search(r"request id (\w+)", message)
    assert request_id, message
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert logged, "the exception must be in the log"
    assert any(request_id.group(1) in r.getMessage() for r in logged)


async def test_a_bug_on_the_fast_path_answers_500_with_the_request_id_only(
    redis_url: str, aredis, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: 'internal error: RuntimeError: <the exception's text>' went to the caller."""
    await model_registry.publish_model(aredis, CONFIG)
    settings = GatewaySettings(redis_url=redis_url)
    app = create_app(settings)  # the inference path in front of Litestar
    state = GatewayState(settings)  # what the application's lifespan builds
    app.state.gateway = state
    await state.start()
    try:
        state.dataplane.infer = _broken  # type: ignore[method-assign]
        messages = [{"type": "http.request", "body": BODY, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await asyncio.Event().wait()  # as a server's: nothing more until a disconnect
            raise AssertionError("unreachable")

        with caplog.at_level(logging.ERROR):
            response, whole = await app.answer(("buggy", None), [], receive)
        assert response is not None and whole
        _check(response.status, response.body.decode(), caplog)
        assert response.headers["X-Request-ID"] in response.body.decode()
    finally:
        await state.stop()


def test_a_bug_behind_a_litestar_route_answers_500_with_the_request_id_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every other route (admin, repository, metadata) goes through the gateway's handlers."""

    @get("/boom")
    async def boom() -> None:
        raise RuntimeError(SECRET)

    with (
        create_test_client(
            [boom], exception_handlers=EXCEPTION_HANDLERS, logging_config=None
        ) as client,
        caplog.at_level(logging.ERROR),
    ):
        response = client.get("/boom")
    _check(response.status_code, response.text, caplog)


def test_a_stopping_gateway_drains_for_as_long_as_a_request_may_run() -> None:
    """Before: a fixed 10 s, shorter than the default 30 s deadline: a rolling restart cut the
    requests still running. Triton's --exit-timeout-secs (default 30) bounds it too."""
    settings = GatewaySettings(exit_timeout_s=3600)
    assert graceful_shutdown_s(settings) > settings.default_timeout_ms / 1000
    longer = GatewaySettings(default_timeout_ms=120_000, exit_timeout_s=3600)
    assert graceful_shutdown_s(longer) > 120
    assert graceful_shutdown_s(GatewaySettings()) == 30.0
    assert graceful_shutdown_s(GatewaySettings(exit_timeout_s=2)) == 2.0

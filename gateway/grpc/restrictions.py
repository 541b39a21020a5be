"""Triton's ``--grpc-restricted-protocol`` on the gateway's gRPC port: one interceptor, in front
of every other, refuses a call to a restricted category (``gateway.core.restricted``: the
category of each method) that lacks ``triton-grpc-protocol-<HEADER>`` with the configured value,
with Triton's status (``UNAVAILABLE``) and text, before the request message is read."""

from __future__ import annotations

from typing import Any

import grpc

from gateway.core.restricted import GRPC_CATEGORY, Restrictions

_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


class RestrictedProtocols(grpc.aio.ServerInterceptor):
    def __init__(self, restrictions: Restrictions):
        self.restrictions = restrictions

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        category = GRPC_CATEGORY.get(details.method)
        if self.restrictions.get(category) is None:
            return await continuation(details)
        metadata = dict(details.invocation_metadata or ())
        message = self.restrictions.refusal(category, metadata)
        handler = await continuation(details)
        if message is None or handler is None:
            return handler

        async def refuse(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

        make = _KINDS[(handler.request_streaming, handler.response_streaming)]
        return make(refuse)

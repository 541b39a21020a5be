"""The admin token: the guard of the admin API (and of the model repository routes, unless
``CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN=false``) and the name of its OpenAPI security scheme."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from gateway.core import auth
from shared.wire.errors import ConchError, ErrorCode

ADMIN_SECURITY = "adminToken"


def admin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """The admin token, compared in constant time; no token configured: the API is off."""
    check_admin_token(
        connection.app.state.gateway.settings.admin_token, connection.headers.get("authorization")
    )


def check_admin_token(expected: str, header: str | None) -> None:
    """The guard's check, for any protocol: ``header`` is the Authorization value sent."""
    if not expected:
        raise ConchError(
            ErrorCode.PERMISSION_DENIED,
            "the admin API is disabled on this gateway: set CONCH_GATEWAY_ADMIN_TOKEN "
            "(conch up --admin-token T)",
        )
    if header is None:
        raise ConchError(
            ErrorCode.UNAUTHENTICATED,
            "the admin API requires the admin token: send 'Authorization: Bearer <admin token>'",
        )
    token = auth.bearer(header) or ""
    if not auth.same_secret(token, expected):
        raise ConchError(ErrorCode.UNAUTHENTICATED, "wrong admin token")

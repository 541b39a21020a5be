"""The OpenAPI schema of the gateway at ``/schema`` (JSON at ``/schema/openapi.json``): Triton's
routes, the model repository extension and the admin API, whose routes need the admin token."""

from __future__ import annotations

import re
from typing import Any

from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from gateway.admin.guard import ADMIN_SECURITY


def operation_id(handler: Any, method: Any, components: list[Any]) -> str:
    """OpenAPI operation ids unique per path (Triton's routes serve several paths each)."""
    parts = [str(getattr(c, "name", c)) for c in components]
    words = [str(getattr(method, "value", method)).lower()]
    words += [re.sub(r"[^0-9A-Za-z]", "", part).title() for part in parts]
    return "".join(words)


def openapi_config(version: str) -> OpenAPIConfig:
    """The schema at /schema (JSON at /schema/openapi.json); admin routes need the token."""
    return OpenAPIConfig(
        title="Conch",
        version=version,
        description="KServe v2 / Triton inference API, Triton's model repository extension "
        "and Conch's admin API (weights, shadow traffic, tenants).",
        path="/schema",
        use_handler_docstrings=True,
        operation_id_creator=operation_id,
        components=Components(
            security_schemes={
                ADMIN_SECURITY: SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="The admin token (CONCH_GATEWAY_ADMIN_TOKEN)",
                )
            }
        ),
    )

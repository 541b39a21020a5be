"""Checks of the admin API's input that a body's types cannot express (versions as keys, names,
API keys), each a pure function whose error names the field. ``gateway.admin.store`` runs them
before it touches Redis."""

from __future__ import annotations

import re

from gateway.admin.bodies import TenantBody, TenantView
from gateway.core import auth
from gateway.core.auth import Tenant
from shared.wire.errors import invalid

MIN_KEY_LENGTH = 16


def validate_weights(raw: dict[str, int]) -> dict[int, int]:
    if not raw:
        raise invalid("field 'weights': expected at least one version, e.g. {\"1\": 90}")
    weights: dict[int, int] = {}
    for version, weight in raw.items():
        if not (version.isascii() and version.isdigit()) or int(version) < 1:
            raise invalid(
                f"field 'weights.{version}': a version must be a positive integer, got '{version}'"
            )
        weights[int(version)] = weight
    if not any(weights.values()):
        raise invalid("field 'weights': weights must not all be zero")
    return weights


def check_tenant_name(name: str) -> None:
    if not re.fullmatch(auth.TENANT_NAME, name):
        raise invalid(
            f"tenant name '{name}' is invalid: expected 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def tenant_from_body(name: str, body: TenantBody) -> Tenant:
    for index, pattern in enumerate(body.models):
        if not pattern.strip():
            raise invalid(f"field 'models[{index}]': expected a model name or glob, got ''")
    for pattern in body.model_rate_limits:
        if not pattern.strip():
            raise invalid("field 'model_rate_limits': a key must be a model name or glob")
    return Tenant(
        name=name,
        rate_limit=body.rate_limit,
        model_rate_limits=dict(body.model_rate_limits),
        priority=body.priority,
        models=list(body.models),
        timeout_ms=body.timeout_ms,
    )


def resolve_keys(api_keys: list[str] | None, current: set[str]) -> list[str]:
    """The digests a PUT's ``api_keys`` stand for (None: keep the current keys)."""
    if api_keys is None:
        return sorted(current)
    digests: list[str] = []
    for index, key in enumerate(api_keys):
        if key.startswith(auth.KEY_ID_PREFIX):
            digest = key[len(auth.KEY_ID_PREFIX) :]
            if digest not in current:
                raise invalid(
                    f"field 'api_keys[{index}]': '{key[:19]}...' is not a key of this tenant; "
                    "name a raw key to add it"
                )
            digests.append(digest)
        elif len(key) < MIN_KEY_LENGTH or key != key.strip():
            raise invalid(
                f"field 'api_keys[{index}]': an API key must have at least {MIN_KEY_LENGTH} "
                "characters and no surrounding spaces (or use generate_keys)"
            )
        else:
            digests.append(auth.hash_key(key))
    return digests


def tenant_view(tenant: Tenant, digests: list[str]) -> TenantView:
    return TenantView(
        name=tenant.name,
        api_keys=[auth.key_id(d) for d in digests],
        rate_limit=tenant.rate_limit,
        model_rate_limits=dict(tenant.model_rate_limits),
        priority=tenant.priority,
        models=list(tenant.models),
        timeout_ms=tenant.timeout_ms,
    )

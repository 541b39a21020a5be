"""Tenants and API keys: who is calling, and may they use this model.

Tenants and the hashes of their keys live in Redis (``shared.wire.keys.tenants``/``api_keys``);
every gateway process keeps a copy that it reloads when the change feed announces a tenant change
(``shared.fleet.change_feed``; the revision counter says whether anything moved), or at the latest
at the feed's safety poll. Authentication is then a dictionary lookup on the request path, and a
revoked key stops working on every gateway within a Redis round trip or two.

Keys are stored as SHA-256 digests: they are random tokens of 192 bits or more (generated) or
chosen by the operator, so a digest cannot be reversed, and a Redis dump reveals no usable key.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import logging
import secrets
from typing import Annotated

import msgspec
import redis.asyncio as aioredis

from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)

# The tenant whose settings (limits, priority, models) apply to requests without a key, when
# anonymous inference is allowed. Without such a tenant, anonymous requests are unrestricted.
ANONYMOUS = "anonymous"
TENANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
KEY_ID_PREFIX = "sha256:"


class RateLimit(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A token bucket: ``requests_per_second`` refill, at most ``burst`` requests at once."""

    requests_per_second: Annotated[float, msgspec.Meta(gt=0, le=1_000_000)]
    burst: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant as stored in Redis and cached by each gateway (its keys are stored apart)."""

    name: str
    rate_limit: RateLimit | None = None
    # Limits for one model (a glob pattern), applied on top of the tenant's own.
    model_rate_limits: dict[str, RateLimit] = {}
    # Default priority level of the tenant's requests (0: the model's default).
    priority: int = 0
    # Models the tenant may use: names or glob patterns ("*" is every model).
    models: list[str] = msgspec.field(default_factory=lambda: ["*"])
    # A deadline for the tenant's requests, unary and streams alike, in ms (0: none; a request's
    # own `timeout` may only shorten it). See shared.wire.deadlines.
    timeout_ms: int = 0

    def may_use(self, model: str) -> bool:
        return any(fnmatch.fnmatchcase(model, pattern) for pattern in self.models)

    def model_limit(self, model: str) -> tuple[str, RateLimit] | None:
        """The per-model limit that applies (exact name first, then the first matching glob)."""
        if model in self.model_rate_limits:
            return model, self.model_rate_limits[model]
        for pattern, limit in self.model_rate_limits.items():
            if fnmatch.fnmatchcase(model, pattern):
                return pattern, limit
        return None


encode_tenant = msgspec.json.encode
decode_tenant = msgspec.json.Decoder(Tenant).decode


def hash_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def key_id(digest: str) -> str:
    """How a stored key is shown (and may be named in a PUT to keep it)."""
    return f"{KEY_ID_PREFIX}{digest}"


def generate_key() -> str:
    return f"conch_{secrets.token_urlsafe(32)}"


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None when there is no header."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ConchError(
            ErrorCode.UNAUTHENTICATED,
            "malformed Authorization header: expected 'Authorization: Bearer <api key>'",
        )
    return token.strip()


def same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def authorize(tenant: Tenant | None, model: str) -> None:
    """403 when the tenant may not use the model (anonymous without a tenant: unrestricted)."""
    if tenant is not None and not tenant.may_use(model):
        raise ConchError(
            ErrorCode.PERMISSION_DENIED,
            f"tenant '{tenant.name}' has no access to model '{model}' "
            f"(its models: {', '.join(tenant.models) or 'none'})",
        )


class TenantTable:
    """This process's copy of the tenants and key digests, reloaded when they change."""

    def __init__(self, r: aioredis.Redis, allow_anonymous: bool):
        self._redis = r
        self.allow_anonymous = allow_anonymous
        self._rev: int | None = None
        self.tenants: dict[str, Tenant] = {}
        self.owners: dict[str, str] = {}

    async def refresh(self) -> None:
        rev = int(await self._redis.get(keys.tenants_rev()) or 0)
        if rev == self._rev:
            return
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(keys.tenants_rev())
            pipe.hgetall(keys.tenants())
            pipe.hgetall(keys.api_keys())
            rev_now, raw_tenants, raw_keys = await pipe.execute()
        tenants: dict[str, Tenant] = {}
        for name, payload in raw_tenants.items():
            try:
                tenant = decode_tenant(payload)
            except msgspec.DecodeError:
                log.error("unreadable tenant record skipped", extra={"tenant": _text(name)})
                continue
            tenants[tenant.name] = tenant
        self.tenants = tenants
        self.owners = {_text(digest): _text(owner) for digest, owner in raw_keys.items()}
        self._rev = int(rev_now or 0)

    @property
    def loaded(self) -> bool:
        return self._rev is not None

    def keyless(self) -> bool:
        """No API key is registered and anonymous inference is on: a key a client must send
        anyway (the ``openai`` client always sends one) identifies nobody, and is ignored."""
        return self.allow_anonymous and not self.owners

    def identify(self, authorization: str | None) -> Tenant | None:
        """The calling tenant: 401 for an unknown or revoked key, or a missing one where
        anonymous inference is off. None: anonymous and unrestricted."""
        token = bearer(authorization)
        if token is None:
            if not self.allow_anonymous:
                raise ConchError(
                    ErrorCode.UNAUTHENTICATED,
                    "this gateway requires an API key: send 'Authorization: Bearer <api key>'",
                )
            return self.tenants.get(ANONYMOUS)
        owner = self.owners.get(hash_key(token))
        tenant = self.tenants.get(owner) if owner is not None else None
        if tenant is None:
            raise ConchError(ErrorCode.UNAUTHENTICATED, "unknown or revoked API key")
        return tenant


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

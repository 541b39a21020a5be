"""Admission of a caller: who may call (the tenant a key belongs to, and its models) and how often
(the tenant's rate limits). Authentication is a lookup in this process's copy of the tenants
(``gateway.core.auth.TenantTable``); the rate limit is one atomic Redis script shared by every
gateway replica (``gateway.core.ratelimit``)."""

from __future__ import annotations

from gateway.core.auth import Tenant, TenantTable, authorize
from gateway.core.caller import Caller
from gateway.core.ratelimit import RateLimiter
from shared.wire.errors import ConchError

# An anonymous caller, authenticated (frozen: one object serves every such request).
_ANONYMOUS = Caller(None, None, False, None, True)


class Admission:
    def __init__(self, tenants: TenantTable, limiter: RateLimiter):
        self.tenants = tenants
        self.limiter = limiter

    def authenticate(self, model: str, caller: Caller) -> Caller:
        """401 / 403 from the headers alone (no Redis): the caller with its tenant."""
        if caller.trusted or caller.authenticated:
            return caller
        tenant = self.tenants.identify(caller.authorization)
        authorize(tenant, model)
        if tenant is None and caller.authorization is None and caller.route_key is None:
            return _ANONYMOUS  # the same answer every time: not built per request
        # Built directly: ``dataclasses.replace`` inspects the fields on every request.
        return Caller(caller.authorization, caller.route_key, False, tenant, True)

    async def admit(self, model: str, caller: Caller) -> Tenant | None:
        """401 / 403 / 429, or the calling tenant (None: anonymous, unrestricted)."""
        if caller.trusted:
            return caller.tenant
        tenant = self.authenticate(model, caller).tenant
        await self.limiter.admit(tenant, model)
        return tenant

    def tenant_label(self, caller: Caller) -> str | None:
        """The tenant a refused caller presented (metrics label): None when anonymous."""
        if caller.tenant is not None:
            return caller.tenant.name
        try:
            tenant = self.tenants.identify(caller.authorization)
        except ConchError:
            return "unknown"
        return tenant.name if tenant is not None else None

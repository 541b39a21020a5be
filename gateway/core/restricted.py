"""Triton's restricted APIs: ``--http-restricted-api`` and ``--grpc-restricted-protocol``.

A setting holds several of Triton's specs joined with ``;``, each
``CATEGORY[,CATEGORY...]:HEADER=VALUE``: a request to an endpoint of a listed category is refused
unless it carries ``HEADER`` with exactly ``VALUE``. Refusals are Triton's own: HTTP 403 with
``{"error": "This API is restricted, expecting header 'HEADER'"}``; gRPC ``UNAVAILABLE`` with
"This protocol is restricted, expecting header 'triton-grpc-protocol-HEADER'" (on gRPC, Triton
prefixes the configured key, and so does Conch). A category may appear in one spec only, as in
Triton. The restriction is checked before anything else (the tenants' API keys come after it:
both apply).

``ROUTES`` is the one table from endpoint to category, for REST (the Litestar routes' path
formats, as its router gives them in ``scope["path_template"]``, and the fast path's
``/infer``) and gRPC (full method names). Conch's own endpoints: the admin API
(``/v2/admin/...``) is ``model-repository`` (fleet control, like the repository API); the
OpenAI-compatible API is ``inference`` (completions) and ``metadata`` (its model list); the
generate routes are ``inference`` (as in Triton); the OpenAPI schema is ``metadata``;
``/metrics`` has no category (Triton serves it on a port of its own, never restricted).
The standard ``grpc.health.v1.Health`` service is ``health``, as in Triton.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import NamedTuple

HEALTH = "health"
METADATA = "metadata"
INFERENCE = "inference"
SHARED_MEMORY = "shared-memory"
MODEL_CONFIG = "model-config"
MODEL_REPOSITORY = "model-repository"
STATISTICS = "statistics"
TRACE = "trace"
LOGGING = "logging"
# Triton's categories, in its order (src/restricted_features.h).
CATEGORIES = (
    HEALTH,
    METADATA,
    INFERENCE,
    SHARED_MEMORY,
    MODEL_CONFIG,
    MODEL_REPOSITORY,
    STATISTICS,
    TRACE,
    LOGGING,
)
# Triton prefixes the key of a gRPC restriction with this.
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
SPEC_FORM = "CATEGORY[,CATEGORY...]:HEADER=VALUE"

INFER_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"


def _infer(*methods: str) -> tuple[str, ...]:
    return tuple(f"/{INFER_SERVICE}/{m}" for m in methods)


_MODEL = "/v2/models/{model}"
_VERSION = "/v2/models/{model}/versions/{version}"
_SHM = ("systemsharedmemory", "cudasharedmemory")


class Row(NamedTuple):
    """One category (None: never restricted), its REST route templates and gRPC methods."""

    category: str | None
    rest: tuple[str, ...]
    grpc: tuple[str, ...]


ROUTES: tuple[Row, ...] = (
    Row(
        HEALTH,
        ("/v2/health/live", "/v2/health/ready", f"{_MODEL}/ready", f"{_VERSION}/ready"),
        (
            *_infer("ServerLive", "ServerReady", "ModelReady"),
            f"/{HEALTH_SERVICE}/Check",
            f"/{HEALTH_SERVICE}/Watch",
        ),
    ),
    Row(
        METADATA,
        (
            "/v2",
            _MODEL,
            _VERSION,
            "/v1/models",
            "/v1/models/{model}",
            "/schema",
            *(
                f"/schema/{page}"
                for page in (
                    "{path}",
                    "openapi.json",
                    "openapi.yaml",
                    "openapi.yml",
                    "swagger",
                    "redoc",
                    "rapidoc",
                    "elements",
                    "oauth2-redirect.html",
                )
            ),
        ),
        _infer("ServerMetadata", "ModelMetadata"),
    ),
    Row(
        INFERENCE,
        (
            *(f"{p}/{verb}" for p in (_MODEL, _VERSION) for verb in ("infer", "generate")),
            f"{_MODEL}/generate_stream",
            f"{_VERSION}/generate_stream",
            "/v1/completions",
            "/v1/chat/completions",
        ),
        _infer("ModelInfer", "ModelStreamInfer"),
    ),
    Row(
        SHARED_MEMORY,
        tuple(
            f"/v2/{kind}/{path}"
            for kind in _SHM
            for path in (
                "status",
                "unregister",
                "region/{name}/status",
                "region/{name}/register",
                "region/{name}/unregister",
            )
        ),
        _infer(
            *(
                f"{kind}SharedMemory{verb}"
                for kind in ("System", "Cuda")
                for verb in ("Status", "Register", "Unregister")
            )
        ),
    ),
    Row(MODEL_CONFIG, (f"{_MODEL}/config", f"{_VERSION}/config"), _infer("ModelConfig")),
    Row(
        MODEL_REPOSITORY,
        (
            "/v2/repository/index",
            "/v2/repository/models/{model}/load",
            "/v2/repository/models/{model}/unload",
            "/v2/admin/models/{model}/weights",
            "/v2/admin/models/{model}/shadow",
            "/v2/admin/tenants",
            "/v2/admin/tenants/{tenant}",
        ),
        _infer("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    ),
    Row(
        STATISTICS,
        ("/v2/models/stats", f"{_MODEL}/stats", f"{_VERSION}/stats"),
        _infer("ModelStatistics"),
    ),
    Row(TRACE, ("/v2/trace/setting", f"{_MODEL}/trace/setting"), _infer("TraceSetting")),
    Row(LOGGING, ("/v2/logging",), _infer("LogSettings")),
    Row(None, ("/metrics",), ()),
)

REST_CATEGORY: dict[str, str | None] = {p: row.category for row in ROUTES for p in row.rest}
GRPC_CATEGORY: dict[str, str | None] = {m: row.category for row in ROUTES for m in row.grpc}


class Restriction(NamedTuple):
    """The header (as configured: named in the refusal) and the value it must carry."""

    header: str
    value: str

    def met_by(self, headers: Mapping[str, str]) -> bool:
        """Whether ``headers`` (lower-case names, as ASGI and gRPC give them) carry the value."""
        given: str | bytes | None = headers.get(self.header.lower())
        if given is None:
            return False
        sent = given if isinstance(given, bytes) else given.encode()  # gRPC "-bin": bytes
        return hmac.compare_digest(sent, self.value.encode())


class Restrictions:
    """One protocol's restricted categories (empty: nothing is restricted)."""

    def __init__(self, by_category: Mapping[str, Restriction], grpc: bool):
        self.by_category = dict(by_category)
        self._what = "protocol" if grpc else "API"

    def __bool__(self) -> bool:
        return bool(self.by_category)

    def get(self, category: str | None) -> Restriction | None:
        return None if category is None else self.by_category.get(category)

    def refusal_text(self, restriction: Restriction) -> str:
        """Triton's message for a request without the header's value."""
        return f"This {self._what} is restricted, expecting header '{restriction.header}'"

    def refusal(self, category: str | None, headers: Mapping[str, str]) -> str | None:
        """Triton's refusal for a request of ``category`` with these headers; None: allowed."""
        restriction = self.get(category)
        if restriction is None or restriction.met_by(headers):
            return None
        return self.refusal_text(restriction)


def parse(text: str, setting: str, *, grpc: bool) -> Restrictions:
    """The restrictions of a setting (``setting`` names it in errors); ``ValueError`` names the
    spec that is wrong and what was expected."""
    feature = "protocol" if grpc else "api"
    prefix = GRPC_HEADER_PREFIX if grpc else ""
    found: dict[str, Restriction] = {}
    for raw in text.split(";"):
        spec = raw.strip()
        if not spec:
            continue
        names, colon, rest = spec.partition(":")
        header, equals, value = rest.partition("=")
        header = header.strip()
        if not (colon and equals and names.strip() and header and value):
            raise ValueError(
                f"{setting}: '{spec}' is not a restriction; expected {SPEC_FORM} "
                f"(several joined with ';'), e.g. 'inference,metadata:x-api-key=secret'"
            )
        for name in (n.strip() for n in names.split(",")):
            if name not in CATEGORIES:
                raise ValueError(
                    f"{setting}: unknown restricted {feature} '{name}' in '{spec}'; "
                    f"expected one of {', '.join(CATEGORIES)}"
                )
            if name in found:
                raise ValueError(
                    f"{setting}: restricted {feature} '{name}' can not be specified in multiple "
                    f"config groups ('{spec}' names it again)"
                )
            found[name] = Restriction(prefix + header, value)
    return Restrictions(found, grpc)

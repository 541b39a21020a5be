"""Triton's restricted APIs (gateway/core/restricted.py): the specs as Triton parses them, the
one table from every endpoint to its category, and the refusal texts; and the pure parts of
response compression (gateway/rest/compression.py)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from tritonclient.grpc import service_pb2

from gateway.core import restricted
from gateway.grpc import health
from gateway.rest import compression
from gateway.rest.app import create_app
from gateway.settings import GatewaySettings
from shared.wire.errors import ConchError


def test_specs_parse_with_triton_form_and_prefix() -> None:
    http = restricted.parse(
        "health,metadata:x-key=a=b; model-repository:admin=s3cret;", "S", grpc=False
    )
    assert http.get("health") == restricted.Restriction("x-key", "a=b")  # value keeps its '='
    assert http.get("metadata") == restricted.Restriction("x-key", "a=b")
    assert http.get("model-repository") == restricted.Restriction("admin", "s3cret")
    assert http.get("inference") is None and http.get(None) is None
    grpc = restricted.parse("inference:Key=v", "S", grpc=True)
    assert grpc.get("inference") == restricted.Restriction("triton-grpc-protocol-Key", "v")
    assert not restricted.parse(" ; ", "S", grpc=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("health", "'health' is not a restriction; expected CATEGORY[,CATEGORY...]:HEADER=VALUE"),
        ("health:key", "'health:key' is not a restriction"),
        (":key=v", "':key=v' is not a restriction"),
        ("health:=v", "'health:=v' is not a restriction"),
        ("health:key=", "'health:key=' is not a restriction"),
        ("helth:key=v", "unknown restricted api 'helth' in 'helth:key=v'; expected one of health,"),
        (
            "health:a=1;metadata,health:b=2",
            "restricted api 'health' can not be specified in multiple config groups",
        ),
    ],
)
def test_a_bad_spec_is_named(text: str, expected: str) -> None:
    with pytest.raises(ValueError, match=r"^SETTING: ") as caught:
        restricted.parse(text, "SETTING", grpc=False)
    assert expected in str(caught.value)


def test_settings_refuse_a_bad_spec_or_level_at_start() -> None:
    with pytest.raises(ConchError, match="CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL: unknown"):
        GatewaySettings.from_env({"CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL": "infer:k=v"})
    with pytest.raises(ConchError, match="COMPRESSION_LEVEL is 'max'; expected one of none"):
        GatewaySettings.from_env({"CONCH_GATEWAY_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL": "max"})


def test_refusals_are_tritons_texts_and_values_must_match_exactly() -> None:
    http = restricted.parse("inference:X-Key=secret", "S", grpc=False)
    refusal = "This API is restricted, expecting header 'X-Key'"
    assert http.refusal("inference", {}) == refusal
    assert http.refusal("inference", {"x-key": "Secret"}) == refusal
    assert http.refusal("inference", {"x-key": "secret"}) is None  # names are case-insensitive
    assert http.refusal("metadata", {}) is None
    grpc = restricted.parse("health:k=v", "S", grpc=True)
    assert grpc.refusal("health", {"k": "v"}) == (
        "This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
    )
    assert grpc.refusal("health", {"triton-grpc-protocol-k": "v"}) is None


def test_every_rest_route_has_a_category_and_the_table_no_stale_route() -> None:
    """A route added without a row in ``restricted.ROUTES`` fails here."""
    app = create_app(GatewaySettings())
    paths = {route.path_format for route in app.app.routes}  # as the guard sees them
    assert paths - set(restricted.REST_CATEGORY) == set()
    assert set(restricted.REST_CATEGORY) - paths == set()
    for path in (
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
    ):
        assert restricted.REST_CATEGORY[path] == restricted.INFERENCE  # the fast path's


def test_every_grpc_method_has_a_category() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    methods = {f"/{restricted.INFER_SERVICE}/{m.name}" for m in service.methods}
    methods |= {f"/{health.SERVICE}/{name}" for name in health.METHODS}
    assert methods == set(restricted.GRPC_CATEGORY)
    assert restricted.GRPC_CATEGORY[f"/{health.SERVICE}/Check"] == restricted.HEALTH
    categories = {row.category for row in restricted.ROUTES} - {None}
    assert categories == set(restricted.CATEGORIES)


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, None),
        ("", None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip, deflate", "gzip"),  # a tie: the first named
        ("deflate;q=0.5, gzip;q=0.8", "gzip"),
        ("identity, gzip", None),
        ("gzip;q=0", None),
        ("gzip;q=0, identity;q=0", None),
        ("br, GZIP;Q=0.3", "gzip"),
        ("*", "gzip"),
        ("gzip;q=0, *;q=0.5", "deflate"),
        ("gzip;q=bad, deflate;q=0.1", "deflate"),
    ],
)
def test_accept_encoding_is_negotiated_as_triton_does(accept: str | None, chosen: str) -> None:
    assert compression.negotiate(accept) == chosen


def test_bodies_compress_to_what_clients_inflate() -> None:
    body = b'{"outputs": [0, 0, 0, 0]}' * 100
    assert gzip.decompress(compression.compress_now(body, "gzip")) == body
    assert zlib.decompress(compression.compress_now(body, "deflate")) == body


def test_health_messages_are_the_standard_protocol_on_the_wire() -> None:
    """grpc/health/v1/health.proto: service = 1 (string), status = 1 (enum ServingStatus)."""
    assert health.HealthCheckRequest(service="x").SerializeToString() == b"\n\x01x"
    assert health.HealthCheckResponse(status=health.SERVING).SerializeToString() == b"\x08\x01"
    assert health.HealthCheckResponse.FromString(b"\x08\x02").status == health.NOT_SERVING
    names = health.HealthCheckResponse.DESCRIPTOR.enum_types_by_name["ServingStatus"].values
    assert [(v.name, v.number) for v in names] == [
        ("UNKNOWN", 0),
        ("SERVING", 1),
        ("NOT_SERVING", 2),
        ("SERVICE_UNKNOWN", 3),
    ]
    assert health.HealthCheckRequest.DESCRIPTOR.full_name == "grpc.health.v1.HealthCheckRequest"

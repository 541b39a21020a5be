"""Tenants, keys and admin input validation: the pure parts."""

from __future__ import annotations

import pytest

from conch.admin import parse_model_limits, parse_weights
from gateway.admin import validation as admin_validation
from gateway.core import auth
from gateway.core.auth import RateLimit, Tenant, TenantTable
from gateway.core.ratelimit import buckets_for
from shared.fleet import control
from shared.model_config import parse_pbtxt
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.queue_ticket import queue_ticket


def table(allow_anonymous: bool = True) -> TenantTable:
    t = TenantTable(None, allow_anonymous)  # type: ignore[arg-type]
    t.tenants = {
        "acme": Tenant(name="acme", models=["simple", "mlp*"], priority=1),
        auth.ANONYMOUS: Tenant(name=auth.ANONYMOUS, models=["simple"]),
    }
    t.owners = {auth.hash_key("acme-key-0123456789"): "acme"}
    return t


def code_of(call) -> ErrorCode:
    with pytest.raises(ConchError) as caught:
        call()
    return caught.value.code


def test_keys_are_stored_as_digests() -> None:
    digest = auth.hash_key("acme-key-0123456789")
    assert len(digest) == 64 and "acme" not in digest
    assert auth.generate_key() != auth.generate_key()
    assert len(auth.generate_key()) > 40


def test_identify_known_unknown_and_missing_keys() -> None:
    t = table()
    assert t.identify("Bearer acme-key-0123456789").name == "acme"
    assert t.identify("bearer   acme-key-0123456789 ").name == "acme"
    assert code_of(lambda: t.identify("Bearer nope")) == ErrorCode.UNAUTHENTICATED
    assert code_of(lambda: t.identify("Basic abc")) == ErrorCode.UNAUTHENTICATED
    assert code_of(lambda: t.identify("Bearer ")) == ErrorCode.UNAUTHENTICATED
    # No key: the anonymous tenant's settings when one is defined, else unrestricted.
    assert t.identify(None).name == auth.ANONYMOUS
    del t.tenants[auth.ANONYMOUS]
    assert t.identify(None) is None
    assert code_of(lambda: table(False).identify(None)) == ErrorCode.UNAUTHENTICATED


def test_a_key_whose_tenant_is_gone_is_refused() -> None:
    t = table()
    del t.tenants["acme"]
    assert code_of(lambda: t.identify("Bearer acme-key-0123456789")) == ErrorCode.UNAUTHENTICATED


def test_model_access_by_name_and_glob() -> None:
    acme = table().tenants["acme"]
    auth.authorize(acme, "simple")
    auth.authorize(acme, "mlp_large")
    auth.authorize(None, "anything")
    assert code_of(lambda: auth.authorize(acme, "slow")) == ErrorCode.PERMISSION_DENIED


def test_buckets_per_tenant_and_per_model() -> None:
    limit = RateLimit(requests_per_second=50, burst=10)
    tenant = Tenant(name="t", rate_limit=limit, model_rate_limits={"mlp*": RateLimit(5, 1)})
    assert buckets_for(tenant, "simple") == [(keys.rate_bucket("t"), limit)]
    assert [b for b, _ in buckets_for(tenant, "mlp")] == [
        keys.rate_bucket("t"),
        keys.rate_bucket("t", "mlp"),
    ]
    assert buckets_for(Tenant(name="free"), "simple") == []


def test_priority_request_then_tenant_then_model_default() -> None:
    config = parse_pbtxt(
        """
        name: "m"
        platform: "onnxruntime_onnx"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        dynamic_batching { priority_levels: 3 default_priority_level: 3 }
        """
    )
    assert queue_ticket(config, {"priority": 2}, default_priority=1).priority == 2
    assert queue_ticket(config, {}, default_priority=1).priority == 1
    assert queue_ticket(config, {"priority": 0}, default_priority=1).priority == 1
    assert queue_ticket(config, {}).priority == 3
    # A tenant default beyond the model's levels means the model's default, as in Triton.
    assert queue_ticket(config, {}, default_priority=7).priority == 3


def test_weights_validation_names_the_field() -> None:
    assert admin_validation.validate_weights({"1": 80, "3": 20}) == {1: 80, 3: 20}
    for raw, fragment in [
        ({}, "at least one version"),
        ({"x": 1}, "weights.x"),
        ({"0": 1}, "weights.0"),
        ({"1": 0, "2": 0}, "must not all be zero"),
    ]:
        with pytest.raises(ConchError) as caught:
            admin_validation.validate_weights(raw)
        assert fragment in caught.value.message


def test_tenant_names_and_keys() -> None:
    admin_validation.check_tenant_name("acme-prod_1.eu")
    for bad in ("", "-x", "a b", "a/b", "x" * 65):
        assert (
            code_of(lambda bad=bad: admin_validation.check_tenant_name(bad))
            == ErrorCode.INVALID_ARG
        )
    current = {auth.hash_key("old-key-0123456789")}
    assert admin_validation.resolve_keys(None, current) == sorted(current)
    assert admin_validation.resolve_keys([], current) == []
    kept = auth.key_id(auth.hash_key("old-key-0123456789"))
    assert admin_validation.resolve_keys([kept, "new-key-0123456789"], current) == [
        auth.hash_key("old-key-0123456789"),
        auth.hash_key("new-key-0123456789"),
    ]
    with pytest.raises(ConchError, match=r"api_keys\[0\]"):
        admin_validation.resolve_keys(["short"], current)
    with pytest.raises(ConchError, match=r"api_keys\[0\]"):
        admin_validation.resolve_keys([auth.key_id("f" * 64)], current)


def test_cli_argument_parsing() -> None:
    assert parse_weights(["1=90", "2=10"]) == {"1": 90, "2": 10}
    with pytest.raises(ValueError, match="VERSION=WEIGHT"):
        parse_weights(["1:90"])
    assert parse_model_limits(["simple=10:5"]) == {
        "simple": {"requests_per_second": 10.0, "burst": 5}
    }
    with pytest.raises(ValueError, match="MODEL=RPS:BURST"):
        parse_model_limits(["simple=10"])


def test_desired_state_after_control_messages() -> None:
    load = control.new_message(control.LOAD, "m", config={"name": "m"})
    state = control.next_state(None, load)
    assert state == control.DesiredState(config={"name": "m"})
    state = control.next_state(state, control.new_message(control.UNLOAD, "m", versions=[2]))
    assert state.excluded == [2] and not state.unloaded and state.config == {"name": "m"}
    state = control.next_state(state, control.new_message(control.UNLOAD, "m"))
    assert state.unloaded and state.excluded == []
    assert control.next_state(state, control.new_message(control.LOAD, "m")) == (
        control.DesiredState()
    )


def test_an_anonymous_caller_is_authenticated_without_a_new_object_each_time() -> None:
    from gateway.core.admission import Admission
    from gateway.core.caller import Caller

    open_table = TenantTable(None, True)  # type: ignore[arg-type]  # no tenants: auth is off
    admission = Admission(open_table, None)  # type: ignore[arg-type]
    first = admission.authenticate("m", Caller())
    assert first == Caller(None, None, False, None, True)
    assert admission.authenticate("m", Caller()) is first
    routed = admission.authenticate("m", Caller(None, "key-1"))
    assert routed == Caller(None, "key-1", False, None, True) and routed is not first
    # A caller with a tenant keeps its own object.
    acme = Admission(table(), None).authenticate("simple", Caller("Bearer acme-key-0123456789"))  # type: ignore[arg-type]
    assert acme.tenant is not None and acme.tenant.name == "acme" and acme.authenticated

"""Hostile ``ModelInfer`` calls over gRPC: every field of the request drawn with junk (names,
datatypes, shapes, typed contents that do not fit, raw contents of the wrong size, parameters
of every kind). Every answer is OK or a client-error status (the gRPC twin of a 4xx), never
INTERNAL/UNKNOWN/UNAVAILABLE, never a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.fuzz.bodies import (
    DATATYPES,
    EDGES,
    HUGE,
    INPUT_NAMES,
    MODELS,
    OUTPUT_NAMES,
    VERSION_ANSWERS,
    versions,
)
from tests.fuzz.checks import ANSWER_WITHIN_S, Tally, orphans
from tests.mesh import Mesh

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

# The gRPC statuses that map to Triton's 4xx answers.
CLIENT_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNIMPLEMENTED,
}
int64 = st.one_of(
    st.integers(-3, 40), st.sampled_from([h for h in HUGE + EDGES if -(2**63) <= h < 2**63])
)
uint64 = st.one_of(
    st.integers(0, 2**64 - 1), st.sampled_from([h for h in HUGE + EDGES if 0 <= h < 2**64])
)


@st.composite
def parameter(draw: st.DrawFn) -> service_pb2.InferParameter:
    kind = draw(st.sampled_from(["bool", "int64", "string", "double", "uint64", "none"]))
    if kind == "bool":
        return service_pb2.InferParameter(bool_param=draw(st.booleans()))
    if kind == "int64":
        return service_pb2.InferParameter(int64_param=draw(int64))
    if kind == "string":
        return service_pb2.InferParameter(string_param=draw(st.text(max_size=10)))
    if kind == "double":
        return service_pb2.InferParameter(double_param=draw(st.floats()))
    if kind == "uint64":
        return service_pb2.InferParameter(uint64_param=draw(uint64))
    return service_pb2.InferParameter()


parameters = st.dictionaries(
    st.sampled_from(
        [
            "priority",
            "timeout",
            "binary_data_size",
            "sequence_id",
            "sequence_start",
            "classification",
            "shared_memory_offset",
            "x",
            "",
        ]
    ),
    parameter(),
    max_size=3,
)


@st.composite
def contents(draw: st.DrawFn) -> service_pb2.InferTensorContents:
    count = draw(st.integers(0, 20))
    kind = draw(st.sampled_from(["int", "int64", "uint", "fp32", "fp64", "bool", "bytes", "mix"]))
    c = service_pb2.InferTensorContents()
    if kind in ("int", "mix"):
        c.int_contents.extend(draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=count)))
    if kind in ("int64", "mix"):
        c.int64_contents.extend(draw(st.lists(int64, max_size=count)))
    if kind == "uint":
        c.uint_contents.extend(draw(st.lists(st.integers(0, 2**32 - 1), max_size=count)))
    if kind == "fp32":
        c.fp32_contents.extend(draw(st.lists(st.floats(width=32), max_size=count)))
    if kind == "fp64":
        c.fp64_contents.extend(draw(st.lists(st.floats(), max_size=count)))
    if kind == "bool":
        c.bool_contents.extend(draw(st.lists(st.booleans(), max_size=count)))
    if kind in ("bytes", "mix"):
        c.bytes_contents.extend(draw(st.lists(st.binary(max_size=12), max_size=count)))
    return c


@st.composite
def infer_request(draw: st.DrawFn) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(
        model_name=draw(st.one_of(st.sampled_from(MODELS), st.text(max_size=10))),
        model_version=draw(versions),
        id=draw(st.text(max_size=12)),
    )
    for key, value in draw(parameters).items():
        request.parameters[key].CopyFrom(value)
    raw_count = 0
    for _ in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(
            name=draw(st.one_of(st.sampled_from(INPUT_NAMES), st.text(max_size=6))),
            datatype=draw(st.one_of(st.sampled_from(DATATYPES), st.text(max_size=6))),
            shape=draw(st.one_of(st.just([1, 16]), st.just([1, 1]), st.lists(int64, max_size=4))),
        )
        for key, value in draw(parameters).items():
            tensor.parameters[key].CopyFrom(value)
        if draw(st.booleans()):
            tensor.contents.CopyFrom(draw(contents()))
        else:
            raw_count += 1
    if draw(st.booleans()):
        request.raw_input_contents.extend(
            draw(st.lists(st.binary(max_size=96), min_size=0, max_size=raw_count + 1))
        )
    for name in draw(st.lists(st.sampled_from(OUTPUT_NAMES), max_size=2)):
        request.outputs.add(name=name)
    return request


@pytest.fixture(scope="module")
def stub(fuzz_mesh: Mesh) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    channel = grpc.insecure_channel(f"127.0.0.1:{fuzz_mesh.grpc_port}")  # type: ignore[attr-defined]
    grpc.channel_ready_future(channel).result(timeout=30)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def run(stub: service_pb2_grpc.GRPCInferenceServiceStub, examples: int, fixed: bool) -> None:
    tally = Tally("grpc ModelInfer")

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=fixed,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(request=infer_request())
    def one(request: service_pb2.ModelInferRequest) -> None:
        started = time.monotonic()
        try:
            stub.ModelInfer(request, timeout=ANSWER_WITHIN_S)
            code = grpc.StatusCode.OK
            detail = ""
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details()
        tally.add(code.name, time.monotonic() - started)
        assert code is grpc.StatusCode.OK or code in CLIENT_ERRORS, f"{code.name}: {detail}"
        if code is not grpc.StatusCode.OK:
            assert detail, f"{code.name} without a message"

    try:
        one()
    finally:
        tally.record()


def test_hostile_grpc_requests_short(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    run(stub, examples=200, fixed=True)


@pytest.mark.chaos
def test_hostile_grpc_requests_full(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    run(stub, examples=5000, fixed=False)


GRPC_ANSWERS = {200: grpc.StatusCode.OK, 404: grpc.StatusCode.NOT_FOUND,
                400: grpc.StatusCode.INVALID_ARGUMENT}  # fmt: skip


def test_every_version_state_short(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    """Every version state of ``versioned``: its status exactly, never UNAVAILABLE for a version
    the policy does not serve (a client would retry it forever)."""
    tally = Tally("grpc versions")

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(version=versions)
    def one(version: str) -> None:
        request = service_pb2.ModelInferRequest(model_name="versioned", model_version=version)
        tensor = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 1])
        tensor.contents.int_contents.append(3)
        started = time.monotonic()
        try:
            stub.ModelInfer(request, timeout=ANSWER_WITHIN_S)
            code, detail = grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            code, detail = exc.code(), exc.details() or ""
        tally.add(code.name, time.monotonic() - started)
        assert code is grpc.StatusCode.OK or code in CLIENT_ERRORS, f"{version!r}: {detail}"
        if version in VERSION_ANSWERS:
            assert code is GRPC_ANSWERS[VERSION_ANSWERS[version]], (version, code, detail)

    try:
        one()
    finally:
        tally.record()


def test_after_grpc_fuzzing_redis_holds_no_orphan(
    fuzz_mesh: Mesh, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    request = service_pb2.ModelInferRequest(model_name="chaos_recorder")
    tensor = request.inputs.add(name="ID", datatype="INT64", shape=[1, 1])
    tensor.contents.int64_contents.append(7)
    reply = stub.ModelInfer(request, timeout=ANSWER_WITHIN_S)
    assert reply.outputs[0].name in ("OUTPUT0", "PID")
    assert orphans(fuzz_mesh.redis_url) == {"queued": 0, "pending": 0, "dead-lettered": 0}


def test_deep_config_override_over_grpc_is_a_client_error(fuzz_mesh: Mesh) -> None:
    """JSON inside a proto: a ``RepositoryModelLoad`` config override nested far past the
    gateway's bound is INVALID_ARGUMENT, not INTERNAL."""
    from tests.fuzz.conftest import ADMIN_TOKEN

    channel = grpc.insecure_channel(f"127.0.0.1:{fuzz_mesh.grpc_port}")  # type: ignore[attr-defined]
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = service_pb2.RepositoryModelLoadRequest(model_name="fuzz_deep")
    request.parameters["config"].string_param = '{"a":' + "[" * 50_000 + "]" * 50_000 + "}"
    try:
        with pytest.raises(grpc.RpcError) as caught:
            stub.RepositoryModelLoad(
                request,
                timeout=ANSWER_WITHIN_S,
                metadata=[("authorization", f"Bearer {ADMIN_TOKEN}")],
            )
    finally:
        channel.close()
    assert caught.value.code() in CLIENT_ERRORS, caught.value.details()
    assert "levels deep" in (caught.value.details() or "")

"""No server error for any client input: the three classes a held-out hostile suite found, as
properties over the codecs and the model table (pure logic, no server; the fuzzers in
``tests/fuzz`` send the same classes through a real mesh).

1. Nesting: JSON nested 1..N levels around and past the bound, in every place a client can
   nest (tensor data, request/input/output parameters, an unknown field): a parse or a client
   error naming the bound, never a ``RecursionError``.
2. Integers: every integer field and parameter at and past 64 bits: a parse whose request the
   mesh can carry (the real envelope encodes it, the real queue ticket reads it), or a client
   error naming the field and the range; never an ``OverflowError``.
3. Versions: every state a requested version can be in (ready, loading, unloaded, never
   existed, on disk but not in the version policy, draining, not a number): a client error
   (4xx) for every version the policy does not serve, 503 only for one it serves that is
   still loading.

Longer than 300 lines because the three classes share one carrying harness (``carry``) and
one model: split, each file would repeat it.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from gateway.core.json_depth import MAX_JSON_DEPTH, check_json_depth, json_depth
from gateway.core.model_table import ModelTable
from gateway.grpc.codec import parse_grpc_request
from gateway.rest.codec import parse_infer_request
from gateway.routing.traffic_table import TrafficTable
from gateway.routing.version_router import VersionRouter
from shared.fleet import submission
from shared.fleet.control import DesiredState, IndexEntry
from shared.fleet.expected_models import Expectations
from shared.model_config.parsing import parse_pbtxt
from shared.wire import envelope, tensors
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.queue_ticket import queue_ticket
from tests.fuzz.bodies import deep_json

QUICK = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CONFIG = parse_pbtxt(
    """
name: "versioned"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_INT32, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_INT32, dims: [ -1 ] } ]
version_policy { specific { versions: [ 2, 3 ] } }
dynamic_batching { priority_levels: 2 default_priority_level: 1 }
"""
)
CLIENT_ERRORS = {
    ErrorCode.INVALID_ARG,
    ErrorCode.NOT_FOUND,
    ErrorCode.UNSUPPORTED,
    ErrorCode.ALREADY_EXISTS,
}
# Integers at and past every 64-bit edge.
EDGES = [
    0, 1, -1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70,
    -(2**63), -(2**63) - 1, -(2**64), -(2**70),
]  # fmt: skip
edges = st.sampled_from(EDGES)


def carry(body: dict[str, Any] | bytes) -> None:
    """Parse ``body`` as the REST codec does and take the request as far as the mesh carries a
    client's request without a server: the queue ticket and both envelopes, encoded and read
    back, and the tensors as a worker reshapes them. Only a client error may stop it."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        parsed = parse_infer_request(raw, None)
        ticket = queue_ticket(CONFIG, parsed.parameters)
        header, payload = submission.build(
            request_id="r",
            model="versioned",
            version=2,
            inputs=parsed.inputs,
            outputs=[o.name for o in parsed.outputs],
            parameters=parsed.parameters,
            reply_to="s",
            now_ms=0,
            deadline_ms=1,
            ticket=ticket,
            batch_size=1,
            shape_sig="",
            priority=parsed.parameters.get("priority") or 0,
        )
        request = envelope.decode_request(envelope.encode(payload))
        envelope.decode_header(envelope.encode(header))
        for tensor in request.inputs:
            tensors.to_numpy(tensor)
    except ConchError as exc:
        assert exc.code in CLIENT_ERRORS, exc
        assert exc.message


# -- 1. nesting -------------------------------------------------------------------------------


def nested(depth: int, leaf: Any = 1, kind: str = "list") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


PLACES = ["data", "request parameter", "input parameter", "output parameter", "unknown field"]


def body_nesting(place: str, value: Any) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": "INPUT0", "shape": [1, 1], "datatype": "INT32"}
    tensor["data"] = value if place == "data" else [[1]]
    body: dict[str, Any] = {"inputs": [tensor]}
    if place == "request parameter":
        body["parameters"] = {"x": value}
    if place == "input parameter":
        tensor["parameters"] = {"x": value}
    if place == "output parameter":
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {"x": value}}]
    if place == "unknown field":
        body["extra"] = value
    return body


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    place=st.sampled_from(PLACES),
    depth=st.one_of(st.integers(1, MAX_JSON_DEPTH + 5), st.sampled_from([1000, 5000, 20_000])),
    kind=st.sampled_from(["list", "dict"]),
)
def test_nesting_at_and_past_the_bound_is_a_client_error(place: str, depth: int, kind: str) -> None:
    value = nested(depth, kind=kind)
    raw = deep_json(body_nesting(place, value), value)
    carry(raw)  # never RecursionError
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(ConchError) as caught:
            parse_infer_request(raw, None)
        assert caught.value.code is ErrorCode.INVALID_ARG
        assert f"more than {MAX_JSON_DEPTH} levels" in caught.value.message


def test_binary_extension_header_is_bounded_too() -> None:
    value = nested(5000)
    header = deep_json(body_nesting("request parameter", value), value)
    with pytest.raises(ConchError, match="levels deep"):
        parse_infer_request(header + b"\0\0\0\0", str(len(header)))


# Strings full of brackets, quotes and escapes: the scan must see through them.
text = st.text(alphabet='[]{}"\\ab,:', max_size=8)
documents = st.recursive(
    st.one_of(text, st.integers(), st.none(), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=3)),
    max_leaves=40,
)


def reference_depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    return 0


@QUICK
@given(document=documents, chunk=st.integers(1, 64))
def test_depth_scan_matches_the_parsed_depth(document: Any, chunk: int) -> None:
    raw = json.dumps(document).encode()
    assert json_depth(raw, chunk_bytes=chunk) == reference_depth(document)
    assert json_depth(raw) == reference_depth(document)


def test_ordinary_bodies_pass_the_depth_check() -> None:
    check_json_depth(json.dumps({"inputs": [{"data": nested(64)}]}).encode())
    check_json_depth(b'{"id": "' + b"[" * 10_000 + b'"}')  # brackets in a string: depth 1


@pytest.mark.parametrize("count", [0, 1, 23, 24, 25, 26, 99, 100, 101, 102, 300])
@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
def test_the_bracket_precount_agrees_with_the_counts(count: int, kind: str) -> None:
    """The find-based precount (few brackets) and the two counts decide alike at every count
    around both of their bounds: deep documents are refused, flat ones with many brackets pass."""
    opens = {"list": "[", "dict": "{", "mixed": "[{"}[kind]
    flat = ",".join("[]" if opens[i % len(opens)] == "[" else "{}" for i in range(count))
    check_json_depth(f"[{flat}]".encode())  # depth 2 at most, whatever the count
    value = nested(count, kind="dict" if kind == "dict" else "list")
    raw = json.dumps(value).encode()
    if count > MAX_JSON_DEPTH:
        with pytest.raises(ConchError, match="levels deep"):
            check_json_depth(raw)
    else:
        check_json_depth(raw)


# -- 2. integers ------------------------------------------------------------------------------

REQUEST_PARAMETERS = ["priority", "timeout", "sequence_id", "x", "binary_data_output"]
INPUT_PARAMETERS = ["binary_data_size", "shared_memory_offset", "x"]
OUTPUT_PARAMETERS = ["classification", "shared_memory_offset", "x"]


@QUICK
@given(
    where=st.sampled_from(["request", "input", "output", "nested", "dim", "dims"]),
    key=st.sampled_from(sorted(set(REQUEST_PARAMETERS + INPUT_PARAMETERS + OUTPUT_PARAMETERS))),
    value=edges,
    datatype=st.sampled_from(["INT32", "BYTES", "FP64"]),
)
def test_every_integer_at_and_past_64_bits_is_carried_or_refused(
    where: str, key: str, value: int, datatype: str
) -> None:
    tensor: dict[str, Any] = {"name": "INPUT0", "shape": [1, 1], "datatype": datatype}
    tensor["data"] = ["a"] if datatype == "BYTES" else [[1]]
    body: dict[str, Any] = {"inputs": [tensor]}
    if where == "request":
        body["parameters"] = {key: value}
    elif where == "input":
        tensor["parameters"] = {key: value}
    elif where == "output":
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {key: value}}]
    elif where == "nested":
        body["parameters"] = {key: {"a": [value]}}
    elif where == "dim":
        tensor["shape"] = [value, 1]
        tensor["data"] = []
    else:  # a zero dimension beside huge ones: no element, still reshaped
        tensor["shape"] = [0, value, value]
        tensor["data"] = []
    carry(body)


@pytest.mark.parametrize(
    ("parameters", "field", "kind"),
    [
        ({"priority": 2**64}, "priority", "uint64"),
        ({"timeout": 2**70}, "timeout", "uint64"),
        ({"sequence_id": 2**64}, "sequence_id", "uint64"),
        ({"custom": 2**63}, "custom", "int64"),
        ({"custom": -(2**63) - 1}, "custom", "int64"),
        ({"custom": {"deep": [2**64]}}, "custom", "int64"),
    ],
)
def test_out_of_range_parameters_name_the_field_and_range(
    parameters: dict[str, Any], field: str, kind: str
) -> None:
    body = {"inputs": [], "parameters": parameters}
    with pytest.raises(ConchError) as caught:
        parse_infer_request(json.dumps(body).encode(), None)
    assert caught.value.code is ErrorCode.INVALID_ARG
    assert f"'{field}'" in caught.value.message and f"({kind})" in caught.value.message


def test_dims_past_int64_are_refused() -> None:
    for shape in ([2**63], [2**64], [0, 2**62, 2**62], [2**62, 4]):
        body = {"inputs": [{"name": "I", "shape": shape, "datatype": "INT32", "data": []}]}
        with pytest.raises(ConchError) as caught:
            parse_infer_request(json.dumps(body).encode(), None)
        assert caught.value.code is ErrorCode.INVALID_ARG, shape
        assert "int64" in caught.value.message


int64_edges = st.sampled_from([e for e in EDGES if -(2**63) <= e < 2**63])
uint64_edges = st.sampled_from([e for e in EDGES if 0 <= e < 2**64])


@QUICK
@given(
    key=st.sampled_from(["priority", "timeout", "sequence_id", "x"]),
    choice=st.sampled_from(["int64_param", "uint64_param"]),
    signed=int64_edges,
    unsigned=uint64_edges,
    dims=st.lists(int64_edges, max_size=4),
)
def test_grpc_integers_at_and_past_64_bits_are_carried_or_refused(
    key: str, choice: str, signed: int, unsigned: int, dims: list[int]
) -> None:
    request = service_pb2.ModelInferRequest(model_name="versioned")
    setattr(request.parameters[key], choice, signed if choice == "int64_param" else unsigned)
    tensor = request.inputs.add(name="INPUT0", datatype="INT32", shape=dims)
    del tensor
    request.raw_input_contents.append(b"")
    try:
        parsed = parse_grpc_request(request)
        ticket = queue_ticket(CONFIG, parsed.parameters)
        header, payload = submission.build(
            request_id="r",
            model="versioned",
            version=2,
            inputs=parsed.inputs,
            outputs=[],
            parameters=parsed.parameters,
            reply_to="s",
            now_ms=0,
            deadline_ms=1,
            ticket=ticket,
            batch_size=1,
            shape_sig="",
            priority=parsed.parameters.get("priority") or 0,
        )
        for tensor_ in envelope.decode_request(envelope.encode(payload)).inputs:
            tensors.to_numpy(tensor_)
        envelope.decode_header(envelope.encode(header))
    except ConchError as exc:
        assert exc.code in CLIENT_ERRORS, exc


# -- 3. versions ------------------------------------------------------------------------------


class _NoRedis:
    """The table is given its view directly; resolving a version never reads Redis."""


def table(live: dict[int, int], excluded: list[int] = ()) -> ModelTable:  # type: ignore[assignment]
    t = ModelTable(_NoRedis())  # type: ignore[arg-type]
    t.configs = {"versioned": CONFIG}
    t.expectations = Expectations(
        scanned=True,
        index={"versioned": IndexEntry(versions=[1, 2, 3])},  # on disk: 1, 2, 3
        states={"versioned": DesiredState(excluded=list(excluded))} if excluded else {},
    )
    t.expected = {"versioned"}
    t._versions = {"versioned": live}  # the view a refresh would read
    return t


# state -> (live instances per version, versions unloaded, draining, version asked, answer)
STATES: dict[str, tuple[dict[int, int], list[int], set[int], str, Any]] = {
    "ready": ({2: 1, 3: 1}, [], set(), "2", 2),
    "latest (-1)": ({2: 1, 3: 1}, [], set(), "-1", 3),
    "draining (pinned)": ({2: 1, 3: 1}, [], {3}, "3", 3),
    "loading": ({3: 1}, [], set(), "2", ErrorCode.UNAVAILABLE),
    "unloaded": ({3: 1}, [2], set(), "2", ErrorCode.NOT_FOUND),
    "never existed": ({2: 1, 3: 1}, [], set(), "7", ErrorCode.NOT_FOUND),
    "on disk, not in policy": ({2: 1, 3: 1}, [], set(), "1", ErrorCode.NOT_FOUND),
    "past int64": ({2: 1}, [], set(), "99999999999999999999", ErrorCode.INVALID_ARG),
    "not a number": ({2: 1}, [], set(), "x", ErrorCode.INVALID_ARG),
    "every served version unloaded": ({}, [2, 3], set(), "", ErrorCode.NOT_FOUND),
}


@pytest.mark.parametrize("state", list(STATES))
def test_every_version_state_gets_its_answer(state: str) -> None:
    live, excluded, draining, asked, answer = STATES[state]
    traffic = TrafficTable(None)  # type: ignore[arg-type]
    traffic.draining = {("versioned", v) for v in draining}
    router = VersionRouter(table(live, excluded), traffic)
    if isinstance(answer, int):
        assert router.route("versioned", asked or None, None) == answer
        return
    with pytest.raises(ConchError) as caught:
        router.route("versioned", asked or None, None)
    assert caught.value.code is answer, caught.value.message
    if answer is ErrorCode.NOT_FOUND:
        assert caught.value.message.startswith("Request for unknown model: 'versioned'")
    if answer is ErrorCode.UNAVAILABLE:  # the one 503: a served version still loading
        assert "version 2 is not at ready state" in caught.value.message


@QUICK
@given(asked=st.one_of(st.integers(-(2**70), 2**70).map(str), st.text(max_size=6)))
def test_no_version_string_is_a_server_error(asked: str) -> None:
    router = VersionRouter(table({2: 1, 3: 1}), TrafficTable(None))  # type: ignore[arg-type]
    try:
        router.route("versioned", asked or None, None)
    except ConchError as exc:
        assert exc.code in CLIENT_ERRORS, exc


_ = msgspec  # the envelopes above are msgspec's

"""Hypothesis strategies for hostile inference requests: KServe v2 JSON bodies with junk in every
field, the binary tensor extension with lying lengths, compressed bodies, and raw bytes.

The strategies stay close to the protocol (real model, input and datatype names mixed with junk)
so that most examples get past the first check and exercise the deeper ones.

Longer than 300 lines because the hostile-input classes (nesting, 64-bit integers, version
states) sit beside the generic strategies they extend, sharing their names and cases.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

MODELS = ["simple", "tokenizer", "chaos_recorder", "no_such_model", "", "../simple", "simple/.."]
INPUT_NAMES = ["INPUT0", "INPUT1", "TEXT", "ID", "OUTPUT0", "", "INPUT0\x00", "é" * 3]
OUTPUT_NAMES = ["OUTPUT0", "OUTPUT1", "TOKEN_IDS", "NORMALIZED", "PID", "nope", ""]
DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES", "int32", "STRING", "", "FP8", "INT128",
]  # fmt: skip
HUGE = [2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63), -(2**70)]

integers = st.one_of(st.integers(-3, 40), st.sampled_from(HUGE))
scalars = st.one_of(
    integers,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.booleans(),
    st.none(),
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=24,
)
shapes = st.one_of(st.lists(integers, max_size=5), junk)
parameters = st.one_of(
    st.dictionaries(
        st.sampled_from(
            ["priority", "timeout", "binary_data_size", "binary_data", "binary_data_output",
             "sequence_id", "sequence_start", "x"]
        ),
        st.one_of(integers, st.booleans(), st.text(max_size=6), junk),
        max_size=3,
    ),
    junk,
)  # fmt: skip


@st.composite
def tensor_data(draw: st.DrawFn) -> Any:
    """Data that may or may not fit the shape: flat, nested, wrong type, huge numbers."""
    count = draw(st.integers(0, 20))
    element = draw(
        st.sampled_from(
            [
                st.integers(-5, 5),
                integers,
                st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=8),
                st.booleans(),
                junk,
            ]
        )
    )
    flat = draw(st.lists(element, min_size=count, max_size=count))
    if draw(st.booleans()) and count % 2 == 0 and count:
        return [flat[: count // 2], flat[count // 2 :]]
    return flat


@st.composite
def infer_input(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(junk)
    tensor: dict[str, Any] = {
        "name": draw(st.one_of(st.sampled_from(INPUT_NAMES), st.text(max_size=8))),
        "datatype": draw(st.one_of(st.sampled_from(DATATYPES), junk)),
        "shape": draw(st.one_of(st.just([1, 16]), st.just([1, 1]), shapes)),
    }
    if draw(st.booleans()):
        tensor["data"] = draw(tensor_data())
    if draw(st.integers(0, 3)) == 0:
        tensor["parameters"] = draw(parameters)
    for key in draw(st.lists(st.sampled_from(["name", "datatype", "shape"]), max_size=1)):
        del tensor[key]
    return tensor


@st.composite
def json_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["id"] = draw(st.one_of(st.text(max_size=20), junk))
    body["inputs"] = draw(st.one_of(st.lists(infer_input(), max_size=4), junk))
    if draw(st.integers(0, 3)) == 0:
        body["outputs"] = draw(
            st.one_of(
                st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(OUTPUT_NAMES)},
                        optional={"parameters": parameters},
                    ),
                    max_size=3,
                ),
                junk,
            )
        )
    if draw(st.integers(0, 2)) == 0:
        body["parameters"] = draw(parameters)
    if draw(st.integers(0, 10)) == 0:
        body[draw(st.text(max_size=6))] = draw(junk)
    return body


@dataclass
class HttpCase:
    """One hostile HTTP inference request."""

    model: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    kind: str = "json"


def _encode(body: Any, allow_nan: bool) -> bytes:
    return json.dumps(body, allow_nan=allow_nan).encode()


@st.composite
def json_case(draw: st.DrawFn) -> HttpCase:
    body = draw(json_body())
    raw = _encode(body, allow_nan=True)  # NaN and Infinity are not JSON: the gateway must say so
    if draw(st.integers(0, 5)) == 0:  # a cut or corrupted body
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=8))
    return HttpCase(draw(st.sampled_from(MODELS)), raw, {"Content-Type": "application/json"})


@st.composite
def binary_case(draw: st.DrawFn) -> HttpCase:
    """The binary tensor extension: a JSON header, raw tensor bytes, and lengths that lie."""
    body = draw(json_body())
    inputs = body.get("inputs")
    if isinstance(inputs, list):
        for tensor in inputs:
            if isinstance(tensor, dict) and draw(st.booleans()):
                tensor.pop("data", None)
                tensor["parameters"] = {
                    "binary_data_size": draw(st.one_of(st.integers(-4, 80), st.sampled_from(HUGE)))
                }
    header = _encode(body, allow_nan=False) if _finite(body) else b"{}"
    tail = draw(st.binary(max_size=128))
    length = draw(
        st.one_of(
            st.just(str(len(header))),
            st.integers(-5, len(header) + len(tail) + 10).map(str),
            st.sampled_from(["", "abc", "1e3", str(2**64), "+12", "0x10", "-0"]),
        )
    )
    return HttpCase(
        draw(st.sampled_from(MODELS)),
        header + tail,
        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": length},
        kind="binary",
    )


@st.composite
def compressed_case(draw: st.DrawFn) -> HttpCase:
    """Content-Encoding gzip/deflate over good and bad bodies, and encodings that lie."""
    inner = draw(st.one_of(json_case(), binary_case()))
    encoding = draw(st.sampled_from(["gzip", "deflate", "br", "identity", "gzip, gzip", "x"]))
    how = draw(st.sampled_from(["right", "wrong", "garbage", "truncated"]))
    if how == "right" and encoding == "gzip":
        data = gzip.compress(inner.body)
    elif how == "right" and encoding == "deflate":
        data = zlib.compress(inner.body)
    elif how == "wrong":
        data = zlib.compress(inner.body) if encoding == "gzip" else gzip.compress(inner.body)
    elif how == "truncated":
        packed = gzip.compress(inner.body)
        data = packed[: draw(st.integers(0, len(packed)))]
    else:
        data = draw(st.binary(max_size=64))
    return HttpCase(
        inner.model, data, {**inner.headers, "Content-Encoding": encoding}, kind="compressed"
    )


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def gzip_bomb(decompressed_bytes: int) -> bytes:
    """A gzip stream of zeros: ``decompressed_bytes`` from about a thousandth as many."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    parts = []
    for _ in range(decompressed_bytes >> 20):
        parts.append(compressor.compress(chunk))
    parts.append(compressor.flush())
    return b"".join(parts)


# -- the classes a held-out hostile suite found (issue 28): taught as classes, not cases -------

# Integers at and past every 64-bit edge.
EDGES = [
    2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -1, -(2**63), -(2**63) - 1, -(2**64), 0, 1,
]  # fmt: skip
# Nesting depths around and far past the gateway's bound (100 levels).
DEPTHS = st.one_of(st.integers(1, 110), st.sampled_from([500, 1000, 5000, 100_000]))
NEST_PLACES = ["data", "parameters", "input parameters", "output parameters", "unknown field", "id"]


def _simple_body() -> dict[str, Any]:
    """A request ``simple`` answers: two INT32 [1, 16] inputs."""
    return {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }


def _nest(depth: int, kind: str, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf] if kind == "list" else {"k": leaf}
    return leaf


@st.composite
def nesting_case(draw: st.DrawFn) -> HttpCase:
    """JSON nested 1..N levels, around and past the bound, wherever a client can nest."""
    body = _simple_body()
    depth = draw(DEPTHS)
    value = _nest(depth, draw(st.sampled_from(["list", "dict"])), draw(st.sampled_from([1, "a"])))
    place = draw(st.sampled_from(NEST_PLACES))
    tensor = body["inputs"][0]
    if place == "data":
        tensor["data"] = value
    elif place == "parameters":
        body["parameters"] = {"x": value}
    elif place == "input parameters":
        tensor["parameters"] = {"x": value}
    elif place == "output parameters":
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {"x": value}}]
    elif place == "unknown field":
        body["extra"] = value
    else:
        body["id"] = value
    raw = json.dumps(body).encode() if depth < 900 else deep_json(body, value)
    return HttpCase("simple", raw, {"Content-Type": "application/json"}, kind="nesting")


def deep_json(body: dict[str, Any], value: Any) -> bytes:
    """``body`` as JSON, with ``value`` (nested lists or ``{"k": ...}`` objects, however deep)
    written by hand: ``json.dumps`` recurses too."""
    depth, kind, leaf = 0, "list", value
    while isinstance(leaf, list | dict):
        kind = "list" if isinstance(leaf, list) else "dict"
        leaf = leaf[0] if isinstance(leaf, list) else leaf["k"]
        depth += 1
    opening, closing = ("[", "]") if kind == "list" else ('{"k":', "}")
    deep = opening * depth + json.dumps(leaf) + closing * depth
    marked = json.dumps(_replace(body, value, "\x00DEEP\x00"))
    return marked.replace(json.dumps("\x00DEEP\x00"), deep).encode()


def _replace(node: Any, target: Any, marker: str) -> Any:
    if node is target:
        return marker
    if isinstance(node, dict):
        return {k: _replace(v, target, marker) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, target, marker) for v in node]
    return node


INTEGER_PLACES = [
    "priority", "timeout", "sequence_id", "custom parameter", "nested parameter",
    "binary_data_size", "input parameter", "classification", "shared_memory_offset",
    "dim", "zero dim beside huge ones", "batch dim",
]  # fmt: skip


@st.composite
def integer_case(draw: st.DrawFn) -> HttpCase:
    """One integer field or parameter of a request ``simple`` answers, set at or past 64 bits."""
    body = _simple_body()
    value = draw(st.sampled_from(EDGES))
    place = draw(st.sampled_from(INTEGER_PLACES))
    # A timeout of 1 µs is a deadline the client asked for and that passes before the request
    # can run: Triton answers it "Request timeout expired" (UNAVAILABLE), and so does Conch.
    # The class is integers that do not fit, not deadlines that are met.
    assume(not (place == "timeout" and value == 1))
    tensor = body["inputs"][0]
    if place in ("priority", "timeout", "sequence_id"):
        body["parameters"] = {place: value}
    elif place == "custom parameter":
        body["parameters"] = {"x": value}
    elif place == "nested parameter":
        body["parameters"] = {"x": {"y": [value]}}
    elif place == "input parameter":
        tensor["parameters"] = {"x": value}
    elif place in ("classification", "shared_memory_offset"):
        body["outputs"] = [{"name": "OUTPUT0", "parameters": {place: value}}]
    elif place == "dim":
        tensor["shape"] = [1, value]
    elif place == "zero dim beside huge ones":
        tensor["shape"] = [0, value, value]
        tensor["data"] = []
    elif place == "batch dim":
        for t in body["inputs"]:
            t["shape"] = [value, 16]
    if place == "binary_data_size":  # the binary extension, with a size that lies
        del tensor["data"]
        tensor["parameters"] = {"binary_data_size": value}
        header = json.dumps(body).encode()
        return HttpCase(
            "simple",
            header + bytes(64),
            {"Content-Type": "application/octet-stream",
             "Inference-Header-Content-Length": str(len(header))},
            kind="integers",
        )  # fmt: skip
    return HttpCase(
        "simple", json.dumps(body).encode(), {"Content-Type": "application/json"}, kind="integers"
    )


# Versions of the fuzz mesh's ``versioned`` model (on disk 1 and 2, policy ``specific [2]``):
# what each one must get. Anything else drawn (junk strings) must get a 4xx.
VERSION_ANSWERS = {
    "": 200, "2": 200, "-1": 200,  # the policy's version; "-1" is Triton's latest
    "1": 404,  # on disk, not in the version policy
    "3": 404, "7": 404, "0": 404, "-2": 404,  # never existed
    "9223372036854775808": 400, "99999999999999999999": 400, "-9223372036854775809": 400,
}  # fmt: skip
versions = st.one_of(st.sampled_from(sorted(VERSION_ANSWERS)), st.text(max_size=6))

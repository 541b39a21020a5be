"""Hypothesis strategies for hostile inference requests: KServe v2 JSON bodies with junk in every
field, the binary tensor extension with lying lengths, compressed bodies, and raw bytes.

The strategies stay close to the protocol (real model, input and datatype names mixed with junk)
so that most examples get past the first check and exercise the deeper ones.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

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

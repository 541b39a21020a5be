"""Pure parts of streaming: frames in seq order, the generate extension's JSON mapping, SSE."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.rest import sse
from gateway.rest.generate_codec import generate_response, parse_generate_request
from shared.fleet.reply_stream import ReplyStream
from shared.model_config import parse_pbtxt
from shared.wire import tensors
from shared.wire.envelope import Reply, decode_replies, encode
from shared.wire.errors import ConchError, ErrorCode


def _frame(seq: int, final: bool = False, error: str = "") -> Reply:
    return Reply("r", "m", 1, seq=seq, final=final, error_code=error, error=error and "boom")


async def _drain(stream: ReplyStream, count: int) -> list[int]:
    return [(await stream.next()).seq for _ in range(count)]


def test_frames_are_handed_on_in_seq_order_once() -> None:
    async def run() -> None:
        stream = ReplyStream("r")
        assert stream.offer(_frame(1))  # held until 0 arrives
        assert stream.offer(_frame(0))
        assert not stream.offer(_frame(0))  # a redelivered frame
        assert stream.offer(_frame(3, final=True))
        assert stream.offer(_frame(2))
        assert await _drain(stream, 4) == [0, 1, 2, 3]
        assert stream.ended and stream.frames == 4
        assert not stream.offer(_frame(4))  # nothing after the final

    asyncio.run(run())


def test_an_error_frame_ends_the_stream_and_fail_ends_it_from_outside() -> None:
    async def run() -> None:
        stream = ReplyStream("r")
        stream.offer(_frame(0))
        stream.offer(_frame(1, error="INTERNAL"))
        assert await _drain(stream, 2) == [0, 1] and stream.ended
        other = ReplyStream("o")
        other.offer(_frame(0))
        other.fail(_frame(7, error="UNAVAILABLE"))
        assert [(await other.next()).seq for _ in range(2)] == [0, 7] and other.ended

    asyncio.run(run())


def test_old_replies_decode_as_one_final_frame() -> None:
    """Readers of the envelope see seq 0, final for a reply without the new fields."""
    old = encode([["r", "m", 1, [], "", "", [0, 0, 0, 0, 0], "w"]])
    (reply,) = decode_replies(old)
    assert (reply.seq, reply.final) == (0, True)


CONFIG = parse_pbtxt(
    """
name: "g" backend: "python" max_batch_size: 4
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
        { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
)


def test_generate_keys_become_inputs_and_parameters() -> None:
    parsed = parse_generate_request(
        CONFIG,
        b'{"text_input": "hi", "max_tokens": 3, "stream": true, '
        b'"parameters": {"temperature": 0.5}}',
    )
    by_name = {t.name: t for t in parsed.inputs}
    assert by_name["text_input"].shape == [1, 1] and by_name["text_input"].datatype == "BYTES"
    assert tensors.to_numpy(by_name["max_tokens"]).tolist() == [[3]]
    assert parsed.parameters == {"temperature": 0.5, "stream": True}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[1]", "must be a JSON object"),
        (b'{"parameters": 3}', "'parameters'"),
        (b'{"other": {"a": 1}}', "not an input of model 'g'"),
        (b'{"max_tokens": "x"}', "'max_tokens'"),
    ],
)
def test_generate_requests_that_cannot_map_are_refused(body: bytes, expected: str) -> None:
    with pytest.raises(ConchError) as caught:
        parse_generate_request(CONFIG, body)
    assert caught.value.code == ErrorCode.INVALID_ARG and expected in caught.value.message


def test_generate_response_flattens_outputs() -> None:
    text = tensors.from_numpy("text_output", np.array([[b"hello"]], dtype=object), "BYTES")
    many = tensors.from_numpy("ids", np.array([[1, 2, 3]], dtype=np.int32))
    assert generate_response("g", 1, [text, many]) == {
        "model_name": "g",
        "model_version": "1",
        "text_output": "hello",
        "ids": [1, 2, 3],
    }


def test_sse_events_end_with_an_error_event_mid_stream() -> None:
    async def frames():
        yield "a"
        raise ConchError(ErrorCode.INTERNAL, "model failed")

    async def run() -> list[bytes]:
        return [chunk async for chunk in sse.events(frames(), None, lambda o: o.encode())]

    assert asyncio.run(run()) == [b"data: a\n\n", b'data: {"error":"model failed"}\n\n']
    assert sse.accepts_events("text/event-stream, */*") and not sse.accepts_events(None)

"""The OpenAI front end's mapping, as pure functions: request bodies → the model's KServe
request (or a refusal naming the field), model frames → OpenAI bodies and SSE chunks, errors in
OpenAI's shape, and the SSE body closing the frame iterator (which cancels) when the client
goes away. The official client against the mesh is tests/e2e/test_generative_e2e.py."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from gateway.openai import routes
from gateway.openai.errors import OpenAIError, from_conch
from gateway.openai.requests import (
    CHAT_MAX_TOKENS,
    Generate,
    chat_prompt,
    parse_chat,
    parse_completion,
    parsed_request,
)
from gateway.openai.responses import ChunkWriter, Totals, read_frame, response_body
from shared.wire import tensors
from shared.wire.envelope import Reply, Tensor
from shared.wire.errors import ConchError, ErrorCode


def _body(**fields: Any) -> bytes:
    return json.dumps({"model": "tiny_gpt", **fields}).encode()


def test_a_completion_becomes_a_streamed_request_with_vllm_names() -> None:
    generate = parse_completion(
        _body(prompt="Hi", max_tokens=5, temperature=0.5, top_p=0.9, seed=3, stop=["\n", "."])
    )
    parsed = parsed_request(generate)
    by_name = {t.name: t for t in parsed.inputs}
    assert tensors.deserialize_bytes(by_name["text_input"].data) == [b"Hi"]
    assert by_name["text_input"].shape == [1]
    assert tensors.deserialize_bytes(by_name["stop"].data) == [b"\n", b"."]
    assert parsed.parameters == {
        "max_tokens": 5,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "stream": True,
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


def test_defaults_follow_openai() -> None:
    completion = parse_completion(_body(prompt=["one prompt"]))
    assert completion.prompt == "one prompt"
    assert completion.sampling == {"max_tokens": 16}
    assert not completion.stream and not completion.include_usage
    chat = parse_chat(_body(messages=[{"role": "user", "content": "x"}], max_completion_tokens=7))
    assert chat.sampling == {"max_tokens": 7}
    assert parse_chat(_body(messages=[{"role": "user", "content": "x"}])).sampling == {
        "max_tokens": CHAT_MAX_TOKENS
    }


def test_chat_messages_become_one_plain_text_prompt() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "!"}],
        },
    ]
    assert chat_prompt(messages) == "system: Be brief.\nuser: Hello!\nassistant: "


@pytest.mark.parametrize(
    ("parse", "fields", "param", "message"),
    [
        (parse_completion, {"prompt": "x", "n": 2}, "n", "'n' is not supported"),
        (parse_completion, {"prompt": "x", "logprobs": 1}, "logprobs", "not supported"),
        (parse_completion, {"prompt": [1, 2]}, "prompt", "token arrays"),
        (parse_completion, {"prompt": ["a", "b"]}, "prompt", "batches of prompts"),
        (parse_completion, {"prompt": "x", "max_tokens": 0}, "max_tokens", "at least 1"),
        (parse_completion, {"prompt": "x", "temperature": 3}, "temperature", "between 0"),
        (parse_completion, {"prompt": "x", "top_p": 0}, "top_p", "between 0.0 and 1.0"),
        (parse_completion, {"prompt": "x", "seed": "s"}, "seed", "an integer"),
        (parse_completion, {"prompt": "x", "stream": "yes"}, "stream", "a boolean"),
        (parse_completion, {"prompt": "x", "stop": ["a", 1]}, "stop", "non-empty strings"),
        (parse_completion, {"prompt": "x", "stop": list("abcde")}, "stop", "at most 4"),
        (
            parse_completion,
            {"prompt": "x", "stream_options": {"include_usage": True}},
            "stream_options",
            "only allowed when 'stream' is true",
        ),
        (parse_chat, {"messages": []}, "messages", "non-empty list"),
        (parse_chat, {"messages": [{"role": "robot", "content": "x"}]}, "messages", "role"),
        (
            parse_chat,
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages",
            "only text parts",
        ),
        (
            parse_chat,
            {"messages": [{"role": "user", "content": "x"}], "tools": [{}]},
            "tools",
            "not supported",
        ),
    ],
)
def test_what_conch_does_not_do_is_refused_naming_the_field(parse, fields, param, message) -> None:
    with pytest.raises(OpenAIError, match=message) as refused:
        parse(_body(**fields))
    assert refused.value.param == param and refused.value.status == 400


def test_a_body_that_is_not_json_or_has_no_model_is_refused() -> None:
    with pytest.raises(OpenAIError, match="not valid JSON"):
        parse_completion(b"{")
    with pytest.raises(OpenAIError, match="'model' is required"):
        parse_completion(json.dumps({"prompt": "x"}).encode())


def _frame_outputs(
    text: str, tokens: int, reason: str | None = None, prompt: int | None = None
) -> list[Tensor]:
    outputs = [Tensor("text_output", "BYTES", [1], tensors.serialize_bytes([text]))]
    outputs.append(Tensor("num_output_tokens", "UINT32", [1], np.uint32([tokens]).tobytes()))
    if reason is not None:
        outputs.append(Tensor("finish_reason", "BYTES", [1], tensors.serialize_bytes([reason])))
    if prompt is not None:
        outputs.append(Tensor("num_input_tokens", "UINT32", [1], np.uint32([prompt]).tobytes()))
    return outputs


FRAMES = [
    _frame_outputs("He", 1),
    _frame_outputs("", 1),  # a token held back (a stop string might be starting)
    _frame_outputs("llo", 2, "stop", 4),
]


def _totals() -> Totals:
    totals = Totals()
    for outputs in FRAMES:
        totals.add(read_frame(outputs))
    return totals


def test_frames_add_up_to_text_usage_and_finish_reason() -> None:
    totals = _totals()
    assert "".join(totals.text) == "Hello"
    assert totals.usage() == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
    assert totals.finish_reason == "stop"
    assert read_frame([]).text == "" and read_frame([]).tokens == 0  # an empty final frame


def test_whole_answers_have_openai_shapes() -> None:
    completion = Generate("m", "Say", stream=False, include_usage=False, chat=False, echo=True)
    body = response_body(completion, _totals(), "cmpl-1", created=5)
    assert body == {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 5,
        "model": "m",
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop", "text": "SayHello"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8},
    }
    chat = Generate("m", "p", stream=False, include_usage=False, chat=True)
    body = response_body(chat, _totals(), "chatcmpl-1", created=5)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}


def test_chat_chunks_start_with_the_role_and_end_with_usage_when_asked() -> None:
    chat = Generate("m", "p", stream=True, include_usage=True, chat=True)
    writer, totals = ChunkWriter(chat, "chatcmpl-1", created=5), Totals()
    chunks = []
    for outputs in FRAMES:
        frame = read_frame(outputs)
        totals.add(frame)
        chunks += writer.frame(frame)
    chunks += writer.usage(totals)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"content": "He"},
        {"content": "llo"},
        {},
        None,
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None, None, None, "stop"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["total_tokens"] == 8 and chunks[-1]["choices"] == []
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}


def test_completion_chunks_without_usage_have_no_usage_key() -> None:
    completion = Generate("m", "p", stream=True, include_usage=False, chat=False)
    writer = ChunkWriter(completion, "cmpl-1", created=5)
    chunks = [c for outputs in FRAMES for c in writer.frame(read_frame(outputs))]
    assert [c["choices"][0]["text"] for c in chunks] == ["He", "llo", ""]
    assert all("usage" not in c for c in chunks)
    assert writer.usage(_totals()) == []


@pytest.mark.parametrize(
    ("code", "status", "kind", "error_code"),
    [
        (ErrorCode.UNAUTHENTICATED, 401, "invalid_request_error", "invalid_api_key"),
        (ErrorCode.RESOURCE_EXHAUSTED, 429, "rate_limit_error", "rate_limit_exceeded"),
        (ErrorCode.NOT_FOUND, 404, "invalid_request_error", "model_not_found"),
        (ErrorCode.INTERNAL, 500, "server_error", None),
        (ErrorCode.UNAVAILABLE, 503, "server_error", "unavailable"),
    ],
)
def test_conch_errors_take_openai_shape_with_triton_statuses(
    code, status, kind, error_code
) -> None:
    got_status, body = from_conch(ConchError(code, "why"))
    assert got_status == status
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] == "why"
    assert (body["error"]["type"], body["error"]["code"]) == (kind, error_code)


@dataclass
class _Outcome:
    reply: Reply


class _Frames:
    """An async iterator of frames that records whether it was closed (the cancel signal)."""

    def __init__(self, outputs: list[list[Tensor]], error: ConchError | None = None):
        self._items = [_Outcome(Reply("r", "m", 1, o)) for o in outputs]
        self._error = error
        self.closed = False

    def __aiter__(self) -> _Frames:
        return self

    async def __anext__(self) -> _Outcome:
        if self._items:
            return self._items.pop(0)
        if self._error is not None:
            raise self._error
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed = True


def _sse_events(chunks: list[bytes]) -> list[Any]:
    events = []
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
        payload = chunk[6:-2]
        events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


async def _collect(frames: _Frames, generate: Generate, left: list[int]) -> list[bytes]:
    first = await anext(frames)
    stream = routes._stream(generate, "cmpl-1", first, frames, lambda: left.append(1))
    return [chunk async for chunk in stream]


def test_the_sse_body_ends_with_done_and_gives_the_in_flight_slot_back() -> None:
    frames, left = _Frames(FRAMES), []
    completion = Generate("m", "p", stream=True, include_usage=True, chat=False)
    events = _sse_events(asyncio.run(_collect(frames, completion, left)))
    assert events[-1] == "[DONE]"
    assert events[-2]["usage"]["completion_tokens"] == 4
    assert frames.closed and left == [1]


def test_a_mid_stream_error_is_an_error_event_then_done() -> None:
    error = ConchError(ErrorCode.INTERNAL, "worker killed mid-stream")
    frames, left = _Frames(FRAMES[:1], error), []
    completion = Generate("m", "p", stream=True, include_usage=False, chat=False)
    events = _sse_events(asyncio.run(_collect(frames, completion, left)))
    assert events[-2] == {
        "error": {
            "message": "worker killed mid-stream",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    assert events[-1] == "[DONE]" and left == [1]


def test_a_client_that_goes_away_closes_the_frames_which_cancels() -> None:
    frames, left = _Frames(FRAMES), []
    completion = Generate("m", "p", stream=True, include_usage=False, chat=False)

    async def read_one_then_leave() -> None:
        first = await anext(frames)
        stream = routes._stream(completion, "cmpl-1", first, frames, lambda: left.append(1))
        await anext(stream)
        await stream.aclose()  # what the server does when the client disconnects

    asyncio.run(read_one_then_leave())
    assert frames.closed and left == [1]

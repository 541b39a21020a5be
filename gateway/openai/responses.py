"""Model frames → OpenAI bodies and stream chunks (pure functions).

Each frame of the model's stream carries ``text_output`` (the new text), ``num_output_tokens``
(the tokens in it) and, on the last, ``finish_reason`` and ``num_input_tokens``, as Triton's
vLLM backend returns them when asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.openai.requests import Generate
from shared.wire import tensors
from shared.wire.envelope import Tensor

FINISH_REASONS = {"length": "length", "stop": "stop"}


@dataclass(frozen=True)
class Frame:
    text: str
    tokens: int
    finish_reason: str | None = None
    prompt_tokens: int | None = None


def read_frame(outputs: list[Tensor]) -> Frame:
    by_name = {t.name: t for t in outputs}
    text = _strings(by_name.get("text_output"))
    reason = _strings(by_name.get("finish_reason"))
    tokens = _count(by_name.get("num_output_tokens"))
    return Frame(
        "".join(text),
        tokens or 0,
        FINISH_REASONS.get(reason[0], reason[0]) if reason else None,
        _count(by_name.get("num_input_tokens")),
    )


def _strings(tensor: Tensor | None) -> list[str]:
    if tensor is None:
        return []
    return [item.decode("utf-8", "replace") for item in tensors.deserialize_bytes(tensor.data)]


def _count(tensor: Tensor | None) -> int | None:
    if tensor is None or not tensor.data:
        return None
    return int(np.frombuffer(tensor.data, dtype=np.uint32).sum())


@dataclass
class Totals:
    """What a generation produced so far: its text, tokens and why it ended."""

    text: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    finish_reason: str | None = None

    def add(self, frame: Frame) -> None:
        self.text.append(frame.text)
        self.completion_tokens += frame.tokens
        if frame.prompt_tokens is not None:
            self.prompt_tokens = frame.prompt_tokens
        if frame.finish_reason is not None:
            self.finish_reason = frame.finish_reason

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


def _head(generate: Generate, response_id: str, created: int, chunk: bool) -> dict[str, Any]:
    if generate.chat:
        kind = "chat.completion.chunk" if chunk else "chat.completion"
    else:
        kind = "text_completion"
    return {"id": response_id, "object": kind, "created": created, "model": generate.model}


def response_body(
    generate: Generate, totals: Totals, response_id: str, created: int | None = None
) -> dict[str, Any]:
    """The whole answer of a request without ``stream``."""
    text = "".join(totals.text)
    if generate.echo:
        text = generate.prompt + text
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": totals.finish_reason}
    if generate.chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    head = _head(generate, response_id, created or int(time.time()), chunk=False)
    return {**head, "choices": [choice], "usage": totals.usage()}


class ChunkWriter:
    """The chunks of a streamed answer, in OpenAI's order: (chat: the role first), one per
    frame with text, the finish reason, then usage when ``include_usage`` asked for it."""

    def __init__(self, generate: Generate, response_id: str, created: int | None = None):
        self._generate = generate
        self._head = _head(generate, response_id, created or int(time.time()), chunk=True)
        self._started = False

    def _chunk(
        self, delta: str | None, finish_reason: str | None, role: bool = False
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if self._generate.chat:
            message: dict[str, str] = {"role": "assistant"} if role else {}
            if delta is not None:
                message["content"] = delta
            choice["delta"] = message
        else:
            choice["text"] = delta or ""
        chunk = {**self._head, "choices": [choice]}
        if self._generate.include_usage:
            chunk["usage"] = None
        return chunk

    def frame(self, frame: Frame) -> list[dict[str, Any]]:
        chunks = []
        if not self._started:
            self._started = True
            if self._generate.chat:
                chunks.append(self._chunk("", None, role=True))
            elif self._generate.echo:
                chunks.append(self._chunk(self._generate.prompt, None))
        if frame.text:
            chunks.append(self._chunk(frame.text, None))
        if frame.finish_reason is not None:
            chunks.append(self._chunk(None if self._generate.chat else "", frame.finish_reason))
        return chunks

    def usage(self, totals: Totals) -> list[dict[str, Any]]:
        if not self._generate.include_usage:
            return []
        return [{**self._head, "choices": [], "usage": totals.usage()}]

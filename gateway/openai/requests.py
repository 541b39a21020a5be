"""OpenAI request bodies → one generation (pure functions).

A completion or chat completion becomes a KServe request to a model with Triton's vLLM-backend
interface: the prompt in ``text_input``, stop strings in ``stop``, the sampling values and
``stream``/``return_*`` switches as request parameters. What Conch does not do is refused by
name (``n`` other than 1, log probabilities, penalties, tools...), never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from gateway.core.request import ParsedRequest
from gateway.openai.errors import OpenAIError
from shared.wire import tensors
from shared.wire.envelope import Tensor

# Chat requests without max_tokens generate until the context is full (the model caps it).
CHAT_MAX_TOKENS = 1_000_000
COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
ROLES = ("system", "developer", "user", "assistant", "tool")

# Fields accepted only at their neutral value: (name, allowed values).
_NEUTRAL: tuple[tuple[str, tuple[Any, ...]], ...] = (
    ("n", (None, 1)),
    ("best_of", (None, 1)),
    ("logprobs", (None, False, 0)),
    ("top_logprobs", (None, 0)),
    ("suffix", (None, "")),
    ("presence_penalty", (None, 0, 0.0)),
    ("frequency_penalty", (None, 0, 0.0)),
    ("logit_bias", (None, {})),
    ("tools", (None, [])),
    ("functions", (None, [])),
    ("tool_choice", (None, "none")),
)


@dataclass(frozen=True)
class Generate:
    """One OpenAI request, checked: what the routes send and how they answer."""

    model: str
    prompt: str
    stream: bool
    include_usage: bool
    chat: bool
    sampling: dict[str, Any] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    echo: bool = False


def _body(raw: bytes) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise OpenAIError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object")
    return body


def _typed(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is not None and (
        (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds)
    ):
        raise OpenAIError(f"'{name}' must be {what}, got {value!r}", name)
    return value


def _common(body: dict[str, Any], chat: bool) -> dict[str, Any]:
    model = _typed(body, "model", (str,), "a model name")
    if not model:
        raise OpenAIError("'model' is required: the name of a model from /v1/models", "model")
    for name, allowed in _NEUTRAL:
        if body.get(name) not in allowed:
            raise OpenAIError(f"'{name}' is not supported by Conch (only {allowed[1]!r})", name)
    stream = bool(_typed(body, "stream", (bool,), "a boolean"))
    options = _typed(body, "stream_options", (dict,), "an object") or {}
    if options and not stream:
        raise OpenAIError(
            "'stream_options' is only allowed when 'stream' is true", "stream_options"
        )
    include_usage = _typed(options, "include_usage", (bool,), "a boolean") or False
    max_tokens = _typed(body, "max_tokens", (int,), "an integer")
    if chat:
        newer = _typed(body, "max_completion_tokens", (int,), "an integer")
        max_tokens = newer if newer is not None else max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise OpenAIError(f"'max_tokens' must be at least 1, got {max_tokens}", "max_tokens")
    if max_tokens is None:
        max_tokens = CHAT_MAX_TOKENS if chat else COMPLETION_MAX_TOKENS
    sampling = {"max_tokens": max_tokens}
    for name, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = _typed(body, name, (int, float), "a number")
        if value is not None:
            if not low <= value <= high or (name == "top_p" and value == 0):
                raise OpenAIError(f"'{name}' must be between {low} and {high}, got {value}", name)
            sampling[name] = float(value)
    seed = _typed(body, "seed", (int,), "an integer")
    if seed is not None:
        sampling["seed"] = seed
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (
        not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
    ):
        raise OpenAIError("'stop' must be a string or a list of non-empty strings", "stop")
    if stop and len(stop) > 4:
        raise OpenAIError(f"'stop' takes at most 4 strings, got {len(stop)}", "stop")
    return {
        "model": model,
        "stream": stream,
        "include_usage": include_usage,
        "sampling": sampling,
        "stop": tuple(stop or ()),
    }


def parse_completion(raw: bytes) -> Generate:
    body = _body(raw)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise OpenAIError(
            "'prompt' must be a string (or a list of one string); token arrays and batches of "
            "prompts are not supported",
            "prompt",
        )
    echo = bool(_typed(body, "echo", (bool,), "a boolean"))
    return Generate(prompt=prompt, chat=False, echo=echo, **_common(body, chat=False))


def _content(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise OpenAIError(
                    f"messages[{index}].content: only text parts are supported", "messages"
                )
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise OpenAIError(f"messages[{index}].content must be a string or text parts", "messages")


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    """The conversation as the character model's plain-text prompt: one ``role: text`` line per
    message, then ``assistant:`` for the answer."""
    lines = [f"{m['role']}: {_content(m, i)}" for i, m in enumerate(messages)]
    return "\n".join([*lines, "assistant: "])


def parse_chat(raw: bytes) -> Generate:
    body = _body(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty list of messages", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise OpenAIError(f"messages[{i}].role must be one of {', '.join(ROLES)}", "messages")
    return Generate(prompt=chat_prompt(messages), chat=True, **_common(body, chat=True))


def parsed_request(generate: Generate, request_id: str = "") -> ParsedRequest:
    """The KServe request to the model (always streamed from the model: one frame per token)."""
    inputs = [Tensor("text_input", "BYTES", [1], tensors.serialize_bytes([generate.prompt]))]
    if generate.stop:
        stop = list(generate.stop)
        inputs.append(Tensor("stop", "BYTES", [len(stop)], tensors.serialize_bytes(stop)))
    parameters = {
        **generate.sampling,
        "stream": True,
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    return ParsedRequest(request_id, inputs, [], parameters, True)

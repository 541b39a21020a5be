"""What one generation asks for, checked once: every bad value is refused with a message that
names the parameter and what was expected (the engine never sees an invalid request)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_TOKENS = 16  # vLLM's default for SamplingParams.max_tokens
MAX_STOPS = 4  # as OpenAI allows


class ParameterError(ValueError):
    """A generation parameter out of range or of the wrong type."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = DEFAULT_MAX_TOKENS
    # 0 (or below 1e-5): greedy, the argmax at every step.
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5


def _number(name: str, value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParameterError(f"'{name}' must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ParameterError(f"'{name}' must be an integer, got {value!r}")
        return int(value)
    if not math.isfinite(value):
        raise ParameterError(f"'{name}' must be finite, got {value!r}")
    return float(value)


def sampling_params(values: dict[str, Any]) -> SamplingParams:
    """From a mapping of the vLLM/OpenAI names (``max_tokens``, ``temperature``, ``top_p``,
    ``seed``, ``stop``); ``None`` means the default."""
    given = {k: v for k, v in values.items() if v is not None}
    max_tokens = _number("max_tokens", given.get("max_tokens", DEFAULT_MAX_TOKENS), int)
    if max_tokens < 1:
        raise ParameterError(f"'max_tokens' must be at least 1, got {max_tokens}")
    temperature = _number("temperature", given.get("temperature", 1.0), float)
    if not 0.0 <= temperature <= 2.0:
        raise ParameterError(f"'temperature' must be between 0 and 2, got {temperature}")
    top_p = _number("top_p", given.get("top_p", 1.0), float)
    if not 0.0 < top_p <= 1.0:
        raise ParameterError(f"'top_p' must be in (0, 1], got {top_p}")
    seed = given.get("seed")
    if seed is not None:
        seed = _number("seed", seed, int)
        if not -(2**63) <= seed < 2**64:
            raise ParameterError(f"'seed' must fit in 64 bits, got {seed}")
    return SamplingParams(max_tokens, temperature, top_p, seed, _stops(given.get("stop")))


def _stops(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str | bytes):
        stop = [stop]
    if not isinstance(stop, list | tuple):
        raise ParameterError(f"'stop' must be a string or a list of strings, got {stop!r}")
    stops = tuple(s.decode() if isinstance(s, bytes) else s for s in stop)
    if not all(isinstance(s, str) for s in stops):
        raise ParameterError(f"'stop' must be a string or a list of strings, got {stop!r}")
    if len(stops) > MAX_STOPS:
        raise ParameterError(f"'stop' takes at most {MAX_STOPS} strings, got {len(stops)}")
    if any(s == "" for s in stops):
        raise ParameterError("'stop' strings must not be empty")
    return stops

"""What goes into the engine (:class:`Generation`) and what comes out (:class:`GenerationEvent`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.generative.params import SamplingParams

FINISH_LENGTH = "length"  # max_tokens reached, or the model's context is full
FINISH_STOP = "stop"  # a stop string appeared
FINISH_CANCELLED = "cancelled"  # the client cancelled or went away
FINISH_ERROR = "error"


@dataclass(frozen=True)
class GenerationEvent:
    """One step's output for one request: the text released by this step (possibly empty, when
    a stop string might be starting), and on the last event why the generation ended."""

    id: str
    text: str
    token_id: int | None
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    error: str = ""


@dataclass
class Generation:
    """A request handed to the engine; ``emit`` is called from the engine's thread, in order,
    once per generated token and once with ``finished`` set (raising from it cancels)."""

    id: str
    prompt: str
    params: SamplingParams
    emit: Callable[[GenerationEvent], None]
    submitted: float = field(default_factory=time.perf_counter)

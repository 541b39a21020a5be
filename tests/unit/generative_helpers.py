"""A small GPT with seeded weights and helpers to drive the engine in process (tests only)."""

from __future__ import annotations

import torch

from workers.generative.engine import Engine
from workers.generative.events import Generation, GenerationEvent
from workers.generative.gpt import GPTConfig, TinyGPT
from workers.generative.params import SamplingParams, sampling_params
from workers.generative.vocab import CharVocab

VOCAB = CharVocab()


def seeded_model(seed: int = 7, block_size: int = 128) -> TinyGPT:
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=len(VOCAB), block_size=block_size, n_layer=2, n_embd=64)
    return TinyGPT(config).eval()


def greedy_direct(model: TinyGPT, prompt: str, max_tokens: int) -> list[int]:
    """Greedy decoding by running the whole sequence through the model at every token: no
    cache, no engine, no batch — the reference the engine must reproduce token for token."""
    ids = VOCAB.encode(prompt)
    out = []
    with torch.no_grad():
        for _ in range(max_tokens):
            token = int(model(torch.tensor([ids]))[0, -1].argmax())
            ids.append(token)
            out.append(token)
    return out


class Collector:
    """Records every event per request id (the engine calls ``emit`` on its thread)."""

    def __init__(self) -> None:
        self.events: dict[str, list[GenerationEvent]] = {}

    def generation(self, request_id: str, prompt: str, **params: object) -> Generation:
        self.events[request_id] = []
        return Generation(
            request_id, prompt, sampling_params(params), self.events[request_id].append
        )

    def tokens(self, request_id: str) -> list[int]:
        return [e.token_id for e in self.events[request_id] if e.token_id is not None]

    def text(self, request_id: str) -> str:
        return "".join(e.text for e in self.events[request_id])

    def final(self, request_id: str) -> GenerationEvent | None:
        events = self.events[request_id]
        return events[-1] if events and events[-1].finished else None


def run_to_end(engine: Engine, limit: int = 10_000) -> int:
    steps = 0
    while engine.has_work() and steps < limit:
        engine.step()
        steps += 1
    return steps


GREEDY = SamplingParams(temperature=0.0)

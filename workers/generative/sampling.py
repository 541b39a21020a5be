"""Choosing the next token from logits: greedy, or sampled with temperature and nucleus (top-p)
from a per-request generator, so that a seed reproduces a generation whatever else runs in the
same batch."""

from __future__ import annotations

import torch

from workers.generative.params import SamplingParams


def generator_for(params: SamplingParams) -> torch.Generator | None:
    if params.greedy:
        return None
    generator = torch.Generator()
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed % 2**64)
    return generator


def next_token(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> int:
    """``logits``: [V] for one sequence."""
    if params.greedy or generator is None:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ordered, dim=-1) - ordered
        ordered = ordered.masked_fill(before >= params.top_p, 0.0)  # keeps at least the top one
        choice = torch.multinomial(ordered, 1, generator=generator)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=generator))

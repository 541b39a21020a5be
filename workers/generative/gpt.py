"""A tiny character-level GPT (decoder-only transformer) with a slot-based KV cache.

The same weights run two ways: :meth:`TinyGPT.forward` over whole sequences (training, and the
reference a test compares the engine with), and :meth:`TinyGPT.prefill` / :meth:`TinyGPT.decode`
against a :class:`KVCache` of fixed slots, which is what continuous batching needs: each running
sequence owns one slot, a decode step advances every slot of the running batch by one token at
its own position, and a finished sequence frees its slot for the next request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    block_size: int = 256
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GPTConfig:  # a JSON object
        known = {k: int(data[k]) for k in cls.__dataclass_fields__ if k in data}
        config = cls(**known)
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd ({config.n_embd}) must be a multiple of n_head")
        return config


class KVCache:
    """Keys and values of every layer for ``slots`` sequences of up to ``block_size`` tokens."""

    def __init__(self, config: GPTConfig, slots: int, device: str = "cpu"):
        head = config.n_embd // config.n_head
        shape = (config.n_layer, slots, config.n_head, config.block_size, head)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)
        self.slots = slots
        self.block_size = config.block_size


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.ln1 = nn.LayerNorm(config.n_embd)
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.ln2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.n_head, c // self.n_head)
        return (
            q.view(shape).transpose(1, 2),
            k.view(shape).transpose(1, 2),
            v.view(shape).transpose(1, 2),
        )

    def _finish(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = y.shape
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        out: torch.Tensor = x + self.mlp(self.ln2(x))  # nn.Module calls return Any
        return out

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Causal attention over the whole sequence; also returns its keys and values."""
        q, k, v = self._heads(x)
        t = x.shape[1]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, T, T]
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return self._finish(x, F.softmax(scores, dim=-1) @ v), k, v

    def step(
        self,
        x: torch.Tensor,
        cache: KVCache,
        layer: int,
        slots: torch.Tensor,
        pos: torch.Tensor,
        hidden: torch.Tensor,
    ) -> torch.Tensor:
        """One new token per slot (``x``: [B, 1, C]) at position ``pos`` of its slot; attends
        over the first ``hidden.shape[1]`` positions, ``hidden`` masking those past ``pos``."""
        q, k, v = self._heads(x)
        cache.k[layer][slots, :, pos] = k[:, :, 0]
        cache.v[layer][slots, :, pos] = v[:, :, 0]
        span = hidden.shape[1]
        keys = cache.k[layer][slots, :, :span]  # [B, H, span, D]
        values = cache.v[layer][slots, :, :span]
        scores = (q @ keys.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # [B, H, 1, span]
        scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
        return self._finish(x, F.softmax(scores, dim=-1) @ values)


class TinyGPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits [B, T, V] for token ids [B, T] (T ≤ block_size), without a cache."""
        return self._run(idx)[0]

    def _run(self, idx: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
        t = idx.shape[1]
        if t > self.config.block_size:
            raise ValueError(f"{t} tokens exceed the model's context of {self.config.block_size}")
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        kvs: list[tuple[torch.Tensor, ...]] = []
        for block in self._blocks():
            x, k, v = block(x)
            kvs.append((k, v))
        return self.head(self.ln_f(x)), kvs

    @torch.no_grad()
    def prefill(self, tokens: list[int], cache: KVCache, slot: int) -> torch.Tensor:
        """Runs a prompt into ``slot`` of the cache; the logits [V] of its last position."""
        idx = torch.tensor([tokens], dtype=torch.long, device=cache.k.device)
        logits, kvs = self._run(idx)
        for layer, (k, v) in enumerate(kvs):
            cache.k[layer, slot, :, : len(tokens)] = k[0]
            cache.v[layer, slot, :, : len(tokens)] = v[0]
        return logits[0, -1]

    @torch.no_grad()
    def decode(
        self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, cache: KVCache
    ) -> torch.Tensor:
        """One token for each running sequence: ids, slots and positions [B]; logits [B, V]."""
        x = (self.tok(tokens) + self.pos(positions))[:, None, :]
        span = int(positions.max()) + 1  # no sequence sees past the longest one
        hidden = torch.arange(span, device=x.device)[None, :] > positions[:, None]
        for layer, block in enumerate(self._blocks()):
            x = block.step(x, cache, layer, slots, positions, hidden)
        logits: torch.Tensor = self.head(self.ln_f(x))  # nn.Module calls return Any
        return logits[:, 0]

    def _blocks(self) -> Iterable[Block]:
        # nn.ModuleList is not generic: its items type as Module.
        return cast(Iterable[Block], self.blocks)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

"""The continuous (iteration-level) batching engine, as Orca and vLLM schedule.

Each :meth:`Engine.step` advances every running sequence by one token in one batched decode,
then lets waiting requests join (prefill: the prompt into a free KV-cache slot, and its first
token) within the step's token budget. Finished, stopped and cancelled sequences leave at the
step that ends them and free their slot. ``batching="static"`` is the comparison: a new batch
(of up to ``static_batch_size`` requests) starts only when the previous one has finished.

Not thread-safe except :meth:`submit` and :meth:`cancel`; ``workers.generative.loop.EngineLoop``
runs the steps on a thread of their own.
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass

import torch

from workers.generative import sampling
from workers.generative.events import (
    FINISH_CANCELLED,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    Generation,
    GenerationEvent,
)
from workers.generative.gpt import KVCache, TinyGPT
from workers.generative.metrics import NullMetrics
from workers.generative.params import ParameterError
from workers.generative.stops import StopMatcher
from workers.generative.vocab import CharVocab

BATCHING_MODES = ("continuous", "static")


@dataclass
class _Sequence:
    generation: Generation
    prompt: list[int]
    slot: int
    generator: torch.Generator | None
    matcher: StopMatcher
    position: int = 0  # where the next token's key/value goes
    last_token: int = 0
    generated: int = 0
    last_emit: float = 0.0


class Engine:
    def __init__(
        self,
        model: TinyGPT,
        vocab: CharVocab,
        *,
        max_sequences: int = 32,
        token_budget: int = 512,
        batching: str = "continuous",
        static_batch_size: int = 1,
        metrics: NullMetrics | None = None,
    ):
        if batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {BATCHING_MODES}, got {batching!r}")
        if max_sequences < 1 or token_budget < 1 or static_batch_size < 1:
            raise ValueError("max_sequences, token_budget and static_batch_size must be >= 1")
        self.model, self.vocab = model, vocab
        self.block_size = model.config.block_size
        self.cache = KVCache(model.config, max_sequences, str(next(model.parameters()).device))
        self.token_budget = token_budget
        self.batching = batching
        self.static_batch_size = min(static_batch_size, max_sequences)
        self.metrics = metrics or NullMetrics()
        self._free = list(range(max_sequences - 1, -1, -1))
        self._running: list[_Sequence] = []
        self._queue: collections.deque[tuple[Generation, list[int]]] = collections.deque()
        self._lock = threading.Lock()
        self._incoming: list[tuple[Generation, list[int]]] = []
        self._cancels: set[str] = set()
        self.wakeup = threading.Event()  # set when work arrives (the loop sleeps on it)
        self.steps = 0

    # -- from any thread -------------------------------------------------------------------
    def submit(self, generation: Generation) -> None:
        """Queues a generation; a prompt that leaves no room in the context is refused here."""
        prompt = self.vocab.encode(generation.prompt)
        if len(prompt) >= self.block_size:
            raise ParameterError(
                f"the prompt has {len(prompt)} tokens; the model's context is {self.block_size} "
                "tokens, prompt and generated together"
            )
        with self._lock:
            self._incoming.append((generation, prompt))
        self.wakeup.set()

    def cancel(self, request_id: str) -> None:
        """The request leaves at the start of the next step (or is never started)."""
        with self._lock:
            self._cancels.add(request_id)
        self.wakeup.set()

    # -- the engine's thread ---------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._queue) + len(self._incoming)

    def has_work(self) -> bool:
        return bool(self._running or self._queue or self._incoming or self._cancels)

    def step(self) -> int:
        """One iteration: drop the cancelled, decode the running, admit the waiting.
        Returns the number of tokens generated."""
        with self._lock:
            self._queue.extend(self._incoming)
            self._incoming.clear()
            cancels, self._cancels = self._cancels, set()
        if cancels:
            self._drop_cancelled(cancels)
        generated = self._decode() if self._running else 0
        prefilled, admitted = self._admit(self.token_budget - generated)
        self.steps += 1
        used = sum(s.position for s in self._running)
        self.metrics.tokens(generated + admitted, prefilled)
        self.metrics.occupancy(
            len(self._running), len(self._queue), used / (self.cache.slots * self.block_size)
        )
        return generated + admitted

    def fail_all(self, message: str) -> None:
        """Ends every running and waiting generation with an error (a failed step, shutdown)."""
        with self._lock:
            self._queue.extend(self._incoming)
            self._incoming.clear()
        for seq in list(self._running):
            self._release(seq)
            self._send(seq.generation, _error(seq.generation, message, len(seq.prompt)))
        while self._queue:
            generation, prompt = self._queue.popleft()
            self._send(generation, _error(generation, message, len(prompt)))

    def _drop_cancelled(self, ids: set[str]) -> None:
        for seq in [s for s in self._running if s.generation.id in ids]:
            self._finish(seq, FINISH_CANCELLED)
        kept: collections.deque[tuple[Generation, list[int]]] = collections.deque()
        for generation, prompt in self._queue:
            if generation.id in ids:
                self.metrics.cancelled()
                event = GenerationEvent(
                    generation.id, "", None, True, FINISH_CANCELLED, len(prompt), 0
                )
                self._send(generation, event)
            else:
                kept.append((generation, prompt))
        self._queue = kept

    def _decode(self) -> int:
        running = list(self._running)
        device = self.cache.k.device
        logits = self.model.decode(
            torch.tensor([s.last_token for s in running], dtype=torch.long, device=device),
            torch.tensor([s.slot for s in running], dtype=torch.long, device=device),
            torch.tensor([s.position for s in running], dtype=torch.long, device=device),
            self.cache,
        ).cpu()  # one transfer per step; sampling runs on the CPU (per-request generators)
        for i, seq in enumerate(running):
            seq.position += 1
            self._token(seq, logits[i])
        return len(running)

    def _admit(self, budget: int) -> tuple[int, int]:
        """Prefills waiting requests into free slots within ``budget`` tokens; returns the prompt
        tokens processed and the first tokens generated."""
        if self.batching == "static":
            if self._running:
                return 0, 0
            room = self.static_batch_size
        else:
            room = len(self._free)
        prefilled = admitted = 0
        while self._queue and self._free and admitted < room:
            generation, prompt = self._queue[0]
            if len(prompt) > budget and (prefilled or self._running):
                break  # waits for a step with room; a prompt over the whole budget goes alone
            self._queue.popleft()
            params = generation.params
            seq = _Sequence(
                generation,
                prompt,
                self._free.pop(),
                sampling.generator_for(params),
                StopMatcher(params.stop),
                position=len(prompt),
            )
            logits = self.model.prefill(prompt, self.cache, seq.slot).cpu()
            self._running.append(seq)
            self._token(seq, logits)
            budget -= len(prompt)
            prefilled += len(prompt)
            admitted += 1
        return prefilled, admitted

    def _token(self, seq: _Sequence, logits: torch.Tensor) -> None:
        generation = seq.generation
        token = sampling.next_token(logits, generation.params, seq.generator)
        seq.last_token = token
        seq.generated += 1
        now = time.perf_counter()
        if seq.generated == 1:
            self.metrics.first_token(now - generation.submitted)
        else:
            self.metrics.inter_token(now - seq.last_emit)
        seq.last_emit = now
        text = seq.matcher.feed(self.vocab.decode([token]))
        reason = None
        if seq.matcher.stopped:
            reason = FINISH_STOP
        elif seq.generated >= generation.params.max_tokens or seq.position >= self.block_size:
            reason = FINISH_LENGTH
            text += seq.matcher.flush()
        event = GenerationEvent(
            generation.id,
            text,
            token,
            reason is not None,
            reason,
            len(seq.prompt),
            seq.generated,
        )
        if reason is not None:
            self._release(seq)
        if not self._send(generation, event) and reason is None:
            self._finish(seq, FINISH_CANCELLED, notify=False)

    def _finish(self, seq: _Sequence, reason: str, notify: bool = True) -> None:
        self._release(seq)
        if reason == FINISH_CANCELLED:
            self.metrics.cancelled()
        if notify:
            event = GenerationEvent(
                seq.generation.id, "", None, True, reason, len(seq.prompt), seq.generated
            )
            self._send(seq.generation, event)

    def _release(self, seq: _Sequence) -> None:
        self._running.remove(seq)
        self._free.append(seq.slot)

    @staticmethod
    def _send(generation: Generation, event: GenerationEvent) -> bool:
        """False when the receiver refused the event (gone): the generation is then dropped."""
        try:
            generation.emit(event)
        except Exception:  # a receiver that fails is a client gone
            return False
        return True


def _error(generation: Generation, message: str, prompt_tokens: int) -> GenerationEvent:
    return GenerationEvent(
        generation.id, "", None, True, FINISH_ERROR, prompt_tokens, 0, error=message
    )

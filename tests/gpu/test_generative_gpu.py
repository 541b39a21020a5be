"""The continuous batching engine on CUDA: greedy output equal, token for token, to the model
run directly on the same device. Run with ``pytest -m gpu tests/gpu`` on a GPU machine."""

from __future__ import annotations

import pytest
import torch

from tests.unit.generative_helpers import VOCAB, Collector, run_to_end, seeded_model
from workers.generative.decoupled import instance_device
from workers.generative.engine import Engine

pytestmark = pytest.mark.gpu


def test_the_engine_on_cuda_matches_the_model_run_directly() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    device = instance_device({"model_instance_kind": "GPU", "model_instance_device_id": "0"})
    model = seeded_model().to(device)
    engine = Engine(model, VOCAB, max_sequences=8)
    collect = Collector()
    prompts = ["The harbour", "A", "ring twice,"]
    for i, prompt in enumerate(prompts):
        engine.submit(collect.generation(str(i), prompt, max_tokens=20, temperature=0))
    run_to_end(engine)
    for i, prompt in enumerate(prompts):
        ids = VOCAB.encode(prompt)
        with torch.no_grad():
            for _ in range(20):
                logits = model(torch.tensor([ids], device=device))
                ids.append(int(logits[0, -1].argmax()))
        assert collect.tokens(str(i)) == ids[-20:], prompt


def test_cpu_instances_stay_on_the_cpu() -> None:
    assert instance_device({"model_instance_kind": "CPU"}) == "cpu"

"""A generative model directory, the Triton way: ``<model>/<version>/weights.pt`` beside
``<model>/<version>/architecture.json`` (the :class:`GPTConfig` and the vocabulary).

The backend loads any model of this architecture from its directory; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workers.generative.gpt import GPTConfig, TinyGPT
from workers.generative.vocab import CharVocab

ARCHITECTURE_FILE = "architecture.json"
WEIGHTS_FILE = "weights.pt"
ARCHITECTURE = "tiny-char-gpt"


def save(model: TinyGPT, vocab: CharVocab, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    architecture = {"architecture": ARCHITECTURE, **model.config.to_json()}
    architecture["characters"] = vocab.characters
    (directory / ARCHITECTURE_FILE).write_text(json.dumps(architecture, indent=2) + "\n")
    torch.save(model.state_dict(), directory / WEIGHTS_FILE)


def load(directory: Path, device: str = "cpu") -> tuple[TinyGPT, CharVocab]:
    """The model in eval mode and its vocabulary; errors name the file and what was expected."""
    path = directory / ARCHITECTURE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a generative model needs {ARCHITECTURE_FILE}")
    data = json.loads(path.read_text())
    if data.get("architecture") != ARCHITECTURE:
        raise ValueError(
            f"{path}: architecture is {data.get('architecture')!r}, expected {ARCHITECTURE!r}"
        )
    vocab = CharVocab(data["characters"])
    config = GPTConfig.from_json({**data, "vocab_size": len(vocab)})
    model = TinyGPT(config)
    state = torch.load(directory / WEIGHTS_FILE, map_location=device, weights_only=True)
    model.load_state_dict(state)
    return model.to(device).eval(), vocab

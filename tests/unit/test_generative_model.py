"""The tiny GPT, its directory format, the example script's determinism and stop strings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from shared.model_config.parsing import load as load_config
from tests.unit.generative_helpers import VOCAB, seeded_model
from workers.generative import checkpoint
from workers.generative.gpt import KVCache
from workers.generative.stops import StopMatcher

ROOT = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location(
        "make_generative_models", ROOT / "examples" / "make_generative_models.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cached_prefill_and_decode_give_the_logits_of_a_full_forward() -> None:
    model = seeded_model()
    tokens = VOCAB.encode("The harbour wakes")
    full = model(torch.tensor([tokens]))[0]
    cache = KVCache(model.config, slots=3)
    last = model.prefill(tokens[:5], cache, slot=2)
    torch.testing.assert_close(last, full[4], rtol=1e-4, atol=1e-5)
    for position in range(5, len(tokens)):
        step = model.decode(
            torch.tensor([tokens[position]]), torch.tensor([2]), torch.tensor([position]), cache
        )
        torch.testing.assert_close(step[0], full[position], rtol=1e-4, atol=1e-5)


def test_a_model_directory_round_trips_and_names_what_is_wrong(tmp_path: Path) -> None:
    model = seeded_model()
    checkpoint.save(model, VOCAB, tmp_path)
    loaded, vocab = checkpoint.load(tmp_path)
    assert vocab.characters == VOCAB.characters
    ids = torch.tensor([VOCAB.encode("abc")])
    torch.testing.assert_close(loaded(ids), model(ids))
    architecture = json.loads((tmp_path / "architecture.json").read_text())
    (tmp_path / "architecture.json").write_text(json.dumps({**architecture, "architecture": "x"}))
    with pytest.raises(ValueError, match="expected 'tiny-char-gpt'"):
        checkpoint.load(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"architecture\.json"):
        checkpoint.load(tmp_path / "missing")


def test_the_example_script_trains_the_same_weights_every_time() -> None:
    script = _script()
    text = (ROOT / "examples" / "generative" / "corpus.txt").read_text()
    first, _ = script.train(text, steps=3)
    second, _ = script.train(text, steps=3)
    for (name, a), (_, b) in zip(
        first.state_dict().items(), second.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_example_model_directory_is_a_decoupled_python_model(tmp_path: Path) -> None:
    script = _script()
    script.STEPS = 2
    directory = script.write(tmp_path)
    config = load_config(directory)
    assert config.backend == "python"
    assert {i.name for i in config.inputs} >= {"text_input", "max_tokens", "temperature", "stop"}
    assert config.outputs[0].name == "text_output"
    assert "decoupled: true" in (directory / "config.pbtxt").read_text()
    assert (directory / "1" / "model.py").is_file()
    checkpoint.load(directory / "1")


def test_stop_strings_hold_back_a_possible_start_and_never_take_text_back() -> None:
    matcher = StopMatcher(("END", "\n\n"))
    released = [matcher.feed(c) for c in "abE"]
    assert "".join(released) == "ab"  # "E" might start "END"
    assert matcher.feed("x") == "Ex"  # it did not
    assert matcher.feed("EN") == ""
    assert matcher.feed("D and more") == ""
    assert matcher.stopped
    other = StopMatcher(("END",))
    assert other.feed("abcEN") == "abc"
    assert other.flush() == "EN"  # the generation ended without the stop string

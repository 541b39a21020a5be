"""The continuous batching engine, in process: output equal to the model run directly,
requests joining and leaving between steps, cancellation within one step, seeds, stop strings,
the token budget and the static mode."""

from __future__ import annotations

import pytest

from tests.unit.generative_helpers import (
    VOCAB,
    Collector,
    greedy_direct,
    run_to_end,
    seeded_model,
)
from workers.generative.engine import Engine
from workers.generative.params import ParameterError

PROMPTS = ["The harbour", "A", "", "Every story in this town begins", "zzz", "ring twice,"]


@pytest.fixture(scope="module")
def model():
    return seeded_model()


def test_greedy_output_equals_the_model_run_directly_token_for_token(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=4)
    collect = Collector()
    for i, prompt in enumerate(PROMPTS):  # more requests than slots: they queue and join
        engine.submit(collect.generation(str(i), prompt, max_tokens=24, temperature=0))
    run_to_end(engine)
    for i, prompt in enumerate(PROMPTS):
        assert collect.tokens(str(i)) == greedy_direct(model, prompt, 24), prompt
        final = collect.final(str(i))
        assert final is not None and final.finish_reason == "length"
        assert final.completion_tokens == 24
        assert final.prompt_tokens == len(VOCAB.encode(prompt))
        assert collect.text(str(i)) == VOCAB.decode(collect.tokens(str(i)))


def test_a_request_added_mid_flight_joins_the_next_step(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=4)
    collect = Collector()
    engine.submit(collect.generation("first", "The harbour", max_tokens=30, temperature=0))
    for _ in range(5):
        engine.step()
    assert len(collect.events["first"]) == 5
    engine.submit(collect.generation("late", "A gull", max_tokens=10, temperature=0))
    engine.step()
    assert engine.running == 2  # both in the running batch after one step
    assert len(collect.events["late"]) == 1  # its first token came in that step
    assert len(collect.events["first"]) == 6  # and the first one was not held up
    run_to_end(engine)
    assert collect.tokens("late") == greedy_direct(model, "A gull", 10)
    assert collect.tokens("first") == greedy_direct(model, "The harbour", 30)


def test_a_cancelled_request_leaves_within_one_step_and_frees_its_slot(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=1)
    collect = Collector()
    engine.submit(collect.generation("a", "The harbour", max_tokens=100, temperature=0))
    engine.submit(collect.generation("b", "A gull", max_tokens=3, temperature=0))
    for _ in range(3):
        engine.step()
    assert engine.running == 1 and engine.waiting == 1  # "b" waits for the only slot
    engine.cancel("a")
    engine.step()
    final = collect.final("a")
    assert final is not None and final.finish_reason == "cancelled"
    assert final.completion_tokens == 3  # no token after the cancel
    assert collect.events["b"]  # "b" took the freed slot in the same step
    run_to_end(engine)
    assert collect.tokens("b") == greedy_direct(model, "A gull", 3)


def test_a_cancelled_request_still_waiting_is_never_started(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=1)
    collect = Collector()
    engine.submit(collect.generation("a", "x", max_tokens=5, temperature=0))
    engine.submit(collect.generation("b", "y", max_tokens=5, temperature=0))
    engine.step()
    engine.cancel("b")
    run_to_end(engine)
    assert [e.finish_reason for e in collect.events["b"]] == ["cancelled"]
    assert collect.events["b"][0].completion_tokens == 0


def test_a_receiver_that_fails_cancels_its_generation(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=2)
    collect = Collector()
    gone = collect.generation("gone", "x", max_tokens=50, temperature=0)

    def refuse(event):
        raise RuntimeError("client gone")

    gone.emit = refuse
    engine.submit(gone)
    engine.step()
    assert engine.running == 0 and not engine.has_work()


def test_seeds_reproduce_whatever_runs_beside_them(model) -> None:
    collect = Collector()
    alone = Engine(model, VOCAB, max_sequences=4)
    alone.submit(collect.generation("alone", "The", max_tokens=40, temperature=1.0, seed=42))
    run_to_end(alone)
    crowded = Engine(model, VOCAB, max_sequences=4)
    crowded.submit(collect.generation("other", "Q", max_tokens=40, temperature=1.0, seed=1))
    crowded.step()
    crowded.submit(collect.generation("crowd", "The", max_tokens=40, temperature=1.0, seed=42))
    crowded.submit(collect.generation("seed7", "The", max_tokens=40, temperature=1.0, seed=7))
    run_to_end(crowded)
    assert collect.tokens("crowd") == collect.tokens("alone")
    assert collect.tokens("seed7") != collect.tokens("alone")
    assert collect.tokens("alone") != greedy_direct(model, "The", 40)  # it did sample


def test_top_p_keeps_only_the_nucleus(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=2)
    collect = Collector()
    engine.submit(collect.generation("p", "The", max_tokens=30, temperature=1.0, top_p=1e-6))
    run_to_end(engine)
    assert collect.tokens("p") == greedy_direct(model, "The", 30)  # only the top token kept


def test_stop_strings_end_the_generation_and_are_not_returned(model) -> None:
    reference = VOCAB.decode(greedy_direct(model, "The harbour", 40))
    stop = reference[10:13]
    engine = Engine(model, VOCAB)
    collect = Collector()
    engine.submit(collect.generation("s", "The harbour", max_tokens=40, temperature=0, stop=stop))
    run_to_end(engine)
    final = collect.final("s")
    assert final is not None and final.finish_reason == "stop"
    assert collect.text("s") == reference[: reference.find(stop)]
    assert final.completion_tokens == reference.find(stop) + len(stop)


def test_generation_ends_when_the_context_is_full() -> None:
    small = seeded_model(block_size=16)
    engine = Engine(small, VOCAB)
    collect = Collector()
    engine.submit(collect.generation("c", "0123456789", max_tokens=100, temperature=0))
    run_to_end(engine)
    final = collect.final("c")
    assert final is not None and final.finish_reason == "length"
    assert final.completion_tokens == 16 - 10 + 1  # positions 10..15 hold generated tokens
    with pytest.raises(ParameterError, match="context is 16 tokens"):
        engine.submit(collect.generation("long", "x" * 16, max_tokens=1))


def test_the_token_budget_delays_prefills_to_later_steps(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=8, token_budget=12)
    collect = Collector()
    for i in range(3):
        engine.submit(collect.generation(str(i), "abcdefghij", max_tokens=5, temperature=0))
    engine.step()
    assert engine.running == 1 and engine.waiting == 2  # 10 prompt tokens each, budget 12
    run_to_end(engine)
    for i in range(3):
        assert collect.tokens(str(i)) == greedy_direct(model, "abcdefghij", 5)


def test_static_mode_starts_a_batch_only_when_the_last_one_finished(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=8, batching="static", static_batch_size=2)
    collect = Collector()
    engine.submit(collect.generation("a", "x", max_tokens=3, temperature=0))
    engine.submit(collect.generation("b", "y", max_tokens=6, temperature=0))
    engine.submit(collect.generation("c", "z", max_tokens=2, temperature=0))
    engine.step()
    assert engine.running == 2 and engine.waiting == 1
    for _ in range(3):
        engine.step()
    assert engine.running == 1 and not collect.events["c"]  # "a" left; "c" may not join yet
    run_to_end(engine)
    assert collect.tokens("c") == greedy_direct(model, "z", 2)


def test_fail_all_answers_every_generation_with_the_reason(model) -> None:
    engine = Engine(model, VOCAB, max_sequences=1)
    collect = Collector()
    engine.submit(collect.generation("a", "x", max_tokens=9))
    engine.submit(collect.generation("b", "y", max_tokens=9))
    engine.step()
    engine.fail_all("unloading")
    for rid in "ab":
        final = collect.final(rid)
        assert final is not None and final.finish_reason == "error" and final.error == "unloading"
    assert not engine.has_work()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": 0}, "'max_tokens' must be at least 1"),
        ({"max_tokens": 1.5}, "'max_tokens' must be an integer"),
        ({"temperature": -1}, "'temperature' must be between 0 and 2"),
        ({"top_p": 0}, r"'top_p' must be in \(0, 1\]"),
        ({"seed": "x"}, "'seed' must be a number"),
        ({"stop": 5}, "'stop' must be a string or a list of strings"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4"),
        ({"stop": [""]}, "must not be empty"),
    ],
)
def test_bad_parameters_are_refused_by_name(params, message) -> None:
    with pytest.raises(ParameterError, match=message):
        Collector().generation("x", "p", **params)

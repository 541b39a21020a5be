"""The ensemble graph: which steps may run, and the one-line refusals at load (Triton's texts)."""

from __future__ import annotations

import pytest

from shared.model_config import ModelConfig, parse_pbtxt
from shared.model_config.ensemble_graph import composing_models, runnable, steps_of, validate
from shared.wire.errors import ConchError, ErrorCode

PAIR = """\
name: "pair"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: -1 {maps} }}'


def ensemble(*steps: str, outputs: tuple[str, ...] = ("OUT",)) -> ModelConfig:
    out = ", ".join(f'{{ name: "{o}" data_type: TYPE_FP32 dims: [ 4 ] }}' for o in outputs)
    text = (
        'name: "ens"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        f"output [ {out} ]\n"
        "ensemble_scheduling { step [ " + ", ".join(steps) + " ] }\n"
    )
    return parse_pbtxt(text, "ens/config.pbtxt")


REPO = {"pair": parse_pbtxt(PAIR, "pair/config.pbtxt")}
DIAMOND = ensemble(
    _step("pair", {"A": "IN", "B": "IN"}, {"X": "left"}),
    _step("pair", {"A": "IN", "B": "IN"}, {"Y": "right"}),
    _step("pair", {"A": "left", "B": "right"}, {"X": "OUT"}),
)


def test_steps_run_when_their_inputs_exist_and_branches_run_together() -> None:
    steps = validate(DIAMOND, REPO)
    assert [s.index for s in runnable(steps, {"IN"}, set())] == [0, 1]  # in parallel
    assert [s.index for s in runnable(steps, {"IN", "left"}, {0})] == [1]
    assert [s.index for s in runnable(steps, {"IN", "left", "right"}, {0, 1})] == [2]
    assert composing_models(DIAMOND) == ["pair"]
    assert steps_of(DIAMOND)[2].needs == {"left", "right"}


@pytest.mark.parametrize(
    ("config", "text"),
    [
        (ensemble(), "must specify 'step' for ensemble 'ens'"),
        (
            ensemble(_step("nope", {"A": "IN"}, {"X": "OUT"})),
            "ensemble 'ens' step 0 (model 'nope'): composing model 'nope' is not in the model "
            "repository",
        ),
        (
            ensemble(
                _step("pair", {"A": "IN", "B": "IN"}, {"X": "OUT"}),
                _step("pair", {"A": "IN", "B": "IN"}, {"X": "OUT"}),
            ),
            "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'ens' step 1",
        ),
        (
            ensemble(_step("pair", {"A": "IN", "B": "ghost"}, {"X": "OUT"})),
            "ensemble tensor 'ghost' used by step 0 (model 'pair') of ensemble 'ens' is not an "
            "ensemble input nor produced by any step",
        ),
        (
            ensemble(
                _step("pair", {"A": "IN", "B": "b"}, {"X": "a"}),
                _step("pair", {"A": "a", "B": "IN"}, {"X": "b", "Y": "OUT"}),
            ),
            "ensemble 'ens' has a cycle: step 0 (model 'pair'), step 1 (model 'pair') wait on "
            "each other's outputs",
        ),
        (
            ensemble(_step("pair", {"A": "IN", "B": "IN"}, {"X": "OUT"}), outputs=("OUT", "MORE")),
            "output 'MORE' for ensemble 'ens' is not written",
        ),
        (
            ensemble(_step("pair", {"A": "IN"}, {"X": "OUT"})),
            "in ensemble ens, input B in model pair is not mapped to any ensemble tensors",
        ),
        (
            ensemble(_step("pair", {"A": "IN", "C": "IN", "B": "IN"}, {"X": "OUT"})),
            "in ensemble ens, ensemble tensor IN is mapping to non-existing input C in model pair",
        ),
        (
            ensemble(_step("pair", {"A": "IN", "B": "IN"}, {"Z": "OUT"})),
            "in ensemble ens, ensemble tensor OUT is mapped from non-existing output Z in model "
            "pair",
        ),
        (
            ensemble(_step("ens", {"A": "IN"}, {"X": "OUT"})),
            "ensemble ens can't contain itself",
        ),
    ],
)
def test_a_bad_ensemble_is_refused_with_one_line(config: ModelConfig, text: str) -> None:
    with pytest.raises(ConchError) as raised:
        validate(config, {**REPO, "ens": config})
    assert raised.value.code == ErrorCode.INVALID_ARG
    assert raised.value.message == text
    assert "\n" not in raised.value.message


def test_sequence_and_decoupled_steps_are_refused_until_built() -> None:
    sequence = parse_pbtxt(PAIR + "sequence_batching { }\n", "pair/config.pbtxt")
    decoupled = parse_pbtxt(
        PAIR + "model_transaction_policy { decoupled: true }\n", "pair/config.pbtxt"
    )
    config = ensemble(_step("pair", {"A": "IN", "B": "IN"}, {"X": "OUT"}))
    for composing, text in (
        (sequence, "sequence models in ensembles are not supported yet"),
        (decoupled, "decoupled models in ensembles are not supported yet"),
    ):
        with pytest.raises(ConchError) as raised:
            validate(config, {"pair": composing})
        assert raised.value.code == ErrorCode.UNSUPPORTED
        assert raised.value.message.startswith("ensemble 'ens' step 0 (model 'pair'): ")
        assert text in raised.value.message

"""Which models may take the direct path (``shared.fleet.direct_path``): Triton's rule sends a
request at once only where the batcher would not wait for more."""

from __future__ import annotations

from shared.fleet.direct_path import direct_levels
from shared.model_config import parse_pbtxt

TENSORS = """
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def config(extra: str, head: str = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n'):
    return parse_pbtxt('name: "m"\n' + head + TENSORS + extra)


def test_no_dynamic_batching_goes_direct() -> None:
    assert direct_levels(config("")) == [1]


def test_a_queue_delay_of_zero_goes_direct_with_every_priority_level() -> None:
    batching = "dynamic_batching { max_queue_delay_microseconds: 0 priority_levels: 3 }"
    assert direct_levels(config(batching)) == [1, 2, 3]
    assert direct_levels(config("dynamic_batching { }")) == [1]


def test_a_batcher_that_waits_never_goes_direct() -> None:
    assert direct_levels(config("dynamic_batching { max_queue_delay_microseconds: 1 }")) == []


def test_the_setting_off_never_goes_direct() -> None:
    assert direct_levels(config(""), enabled=False) == []


def test_decoupled_and_sequence_models_never_go_direct() -> None:
    decoupled = "model_transaction_policy { decoupled: true }"
    assert direct_levels(config(decoupled)) == []
    sequence = "sequence_batching { max_sequence_idle_microseconds: 1000000 }"
    assert direct_levels(config(sequence)) == []


def test_an_ensemble_never_goes_direct() -> None:
    ensemble = config(
        'ensemble_scheduling { step [ { model_name: "a" model_version: -1 '
        'input_map { key: "X" value: "X" } output_map { key: "Y" value: "Y" } } ] }',
        head='platform: "ensemble"\nmax_batch_size: 8\n',
    )
    assert direct_levels(ensemble) == []

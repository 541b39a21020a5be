"""The pure parts of sequence batching: request parameters and their Triton errors, the typed
``sequence_batching`` spec, Triton's config rules, control tensors, the batch policies and the
state codec. No Redis, no server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from shared.model_config import parse_pbtxt
from shared.model_config.sequences import sequence_spec
from shared.wire.errors import ConchError, ErrorCode
from shared.wire.sequence_params import FLAG_END, FLAG_START, check_grpc_choice, lenient, parse
from workers.sequence import state as state_codec
from workers.sequence.controls import control_tensors
from workers.sequence.policy import assign_slot, plan_direct, plan_oldest
from workers.sequence.support import check_sequence_support

SOURCE = "models/m/config.pbtxt"
BASE = """name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def control(name: str, kind: str, values: str = "int32_false_true: [ 0, 1 ]") -> str:
    return f'{{ name: "{name}" control [ {{ kind: {kind} {values} }} ] }}'


def config(body: str, base: str = BASE):  # type: ignore[no-untyped-def]
    return parse_pbtxt(base + "sequence_batching {\n" + body + "\n}\n", SOURCE)


def refusal(body: str, base: str = BASE) -> str:
    with pytest.raises(ConchError) as info:
        config(body, base)
    assert info.value.code is ErrorCode.INVALID_ARG
    return info.value.message


# --- request parameters -------------------------------------------------------------------------


def test_parameters_parse_as_triton_reads_them() -> None:
    assert not parse({}).in_sequence
    params = parse({"sequence_id": 42, "sequence_start": True, "sequence_end": False})
    assert (params.id, params.flags, params.key) == (42, FLAG_START, "u:42")
    text = parse({"sequence_id": "42", "sequence_end": True})
    assert (text.id, text.flags, text.key, text.is_string) == ("42", FLAG_END, "s:42", True)
    assert parse({"sequence_id": 2**64 - 1}).id == 2**64 - 1
    assert not parse({"sequence_id": ""}).in_sequence


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"sequence_id": -1}, "Unable to parse 'sequence_id'"),
        ({"sequence_id": 2**64}, "Unable to parse 'sequence_id'"),
        ({"sequence_id": 1.5}, "Unable to parse 'sequence_id'"),
        ({"sequence_id": True}, "Unable to parse 'sequence_id'"),
        ({"sequence_id": 1, "sequence_start": 1}, "Unable to parse 'sequence_start'"),
        ({"sequence_id": 1, "sequence_end": "yes"}, "Unable to parse 'sequence_end'"),
    ],
)
def test_unparsable_parameters_get_tritons_http_errors(
    parameters: dict[str, object], message: str
) -> None:
    with pytest.raises(ConchError) as info:
        parse(parameters)
    assert info.value.code is ErrorCode.INVALID_ARG
    assert info.value.message == message
    assert not lenient(parameters).in_sequence


def test_string_ids_longer_than_128_are_unsupported() -> None:
    assert parse({"sequence_id": "x" * 128}).id == "x" * 128
    with pytest.raises(ConchError) as info:
        parse({"sequence_id": "x" * 129})
    assert info.value.code is ErrorCode.UNSUPPORTED
    assert info.value.message == "string correlation ID cannot be longer than 128 characters"


def test_grpc_parameter_choices_follow_triton() -> None:
    check_grpc_choice("sequence_id", "int64_param")
    check_grpc_choice("sequence_id", "string_param")
    check_grpc_choice("sequence_start", "bool_param")
    check_grpc_choice("priority", "uint64_param")  # not a sequence parameter: not checked here
    with pytest.raises(ConchError, match="expected int64_param or string_param"):
        check_grpc_choice("sequence_id", "uint64_param")
    with pytest.raises(ConchError, match="'sequence_end' parameter, expected bool_param"):
        check_grpc_choice("sequence_end", "int64_param")


# --- the spec and Triton's config rules ---------------------------------------------------------


def test_direct_spec_defaults_as_triton() -> None:
    spec = sequence_spec(config(f"control_input [ {control('START', 'CONTROL_SEQUENCE_START')} ]"))
    assert spec is not None
    assert (spec.strategy, spec.slots, spec.max_batch, spec.idle_us) == ("direct", 4, 4, 1_000_000)
    assert [(c.kind, c.name, c.datatype) for c in spec.controls] == [("START", "START", "INT32")]
    assert spec.corrid is None and not spec.string_ids


def test_oldest_spec_reads_every_field() -> None:
    body = f"""
      max_sequence_idle_microseconds: 2500000
      oldest {{ max_candidate_sequences: 16 preferred_batch_size: [ 2, 4 ]
               max_queue_delay_microseconds: 300 }}
      control_input [
        {control("S", "CONTROL_SEQUENCE_START", "fp32_false_true: [ 0.5, 2.5 ]")},
        {control("R", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]")},
        {{ name: "C" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }} ] }}
      ]
      state [ {{ input_name: "IS" output_name: "OS" data_type: TYPE_FP32 dims: [ -1, 2 ]
                initial_state: {{ data_type: TYPE_FP32 dims: [ 3, 2 ] zero_data: true name: "z" }}
              }} ]"""
    spec = sequence_spec(config(body))
    assert spec is not None
    assert (spec.strategy, spec.slots, spec.max_batch) == ("oldest", 16, 4)
    assert spec.preferred_batch_sizes == (2, 4) and spec.queue_delay_us == 300
    assert spec.idle_us == 2_500_000
    start, ready = spec.controls
    assert (start.datatype, start.false_value, start.true_value) == ("FP32", 0.5, 2.5)
    assert (ready.datatype, ready.false_value, ready.true_value) == ("BOOL", False, True)
    assert spec.corrid is not None and spec.corrid.datatype == "BYTES" and spec.string_ids
    (state,) = spec.states
    assert (state.input_name, state.output_name, state.datatype) == ("IS", "OS", "FP32")
    assert state.initial is not None and state.initial.dims == [3, 2] and state.initial.zero_data


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'control_input [ { name: "" control [ { kind: CONTROL_SEQUENCE_START '
            "int32_false_true: [ 0, 1 ] } ] } ]",
            "sequence batching control tensor must have a name for m",
        ),
        (
            f"control_input [ {control('A', 'CONTROL_SEQUENCE_START')}, "
            f"{control('A', 'CONTROL_SEQUENCE_READY')} ]",
            "sequence batching control tensor 'A' is specified for multiple control kinds for m",
        ),
        (
            f"control_input [ {control('A', 'CONTROL_SEQUENCE_START')}, "
            f"{control('B', 'CONTROL_SEQUENCE_START')} ]",
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
        ),
        (
            'control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_END } ] } ]',
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            "'bool_false_true' for CONTROL_SEQUENCE_END for m",
        ),
        (
            f"control_input [ {control('A', 'CONTROL_SEQUENCE_READY', 'int32_false_true: [1]')} ]",
            "sequence batching control 'int32_false_true' must have exactly 2 entries for "
            "CONTROL_SEQUENCE_READY for m",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ]",
            "unexpected data type for control CONTROL_SEQUENCE_CORRID for m. Allowed data types "
            "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
        ),
        (
            "oldest { preferred_batch_size: [ 8 ] }",
            "sequence batching preferred batch size must be <= max batch size for m",
        ),
        (
            "direct { minimum_slot_utilization: 1.5 }",
            "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 1 ] '
            'initial_state: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" } } ]',
            "The data type used for 'initial_state' field of state 'I' does not match the state "
            "data type.",
        ),
        (
            'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ -1 ] '
            'initial_state: { data_type: TYPE_INT32 dims: [ -1 ] zero_data: true name: "z" } } ]',
            "'initial_state' field for state input name 'I' contains variable dimensions.",
        ),
    ],
)
def test_tritons_config_rules_refuse_with_tritons_words(body: str, message: str) -> None:
    assert refusal(body) == f"{SOURCE}: {message}"


def test_unsupported_pieces_are_refused_at_load_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConchError) as info:
        check_sequence_support(config("iterative_sequence: true"), tmp_path)
    assert info.value.code is ErrorCode.UNSUPPORTED
    assert "iterative_sequence" in info.value.message and "\n" not in info.value.message
    decoupled = BASE + "model_transaction_policy { decoupled: true }\n"
    with pytest.raises(ConchError, match="decoupled"):
        check_sequence_support(config("", decoupled), tmp_path)
    missing = (
        'state [ { input_name: "I" output_name: "O" data_type: TYPE_INT32 dims: [ 2 ] '
        'initial_state: { data_type: TYPE_INT32 dims: [ 2 ] data_file: "nope" name: "f" } } ]'
    )
    with pytest.raises(ConchError, match="cannot read"):
        check_sequence_support(config(missing), tmp_path)


# --- control tensors ----------------------------------------------------------------------------


def test_controls_carry_the_configured_values() -> None:
    body = f"""control_input [
        {control("S", "CONTROL_SEQUENCE_START", "fp32_false_true: [ -1, 7 ]")},
        {control("E", "CONTROL_SEQUENCE_END")},
        {control("R", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]")},
        {{ name: "C" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT32 }} ] }}
    ]"""
    spec = sequence_spec(config(body))
    assert spec is not None
    start = control_tensors(spec, FLAG_START, 2**32 + 5)
    assert start["S"].tolist() == [[7.0]] and start["S"].dtype == np.float32
    assert start["E"].tolist() == [[0]] and start["R"].tolist() == [[True]]
    assert start["C"].tolist() == [[5]] and start["C"].dtype == np.uint32  # Triton's low bytes
    both = control_tensors(spec, FLAG_START | FLAG_END, 9)
    assert both["S"].tolist() == [[7.0]] and both["E"].tolist() == [[1]]
    padding = control_tensors(spec, FLAG_START | FLAG_END, 9, ready=False)
    assert padding["S"].tolist() == [[-1.0]] and padding["E"].tolist() == [[0]]
    assert padding["R"].tolist() == [[False]] and padding["C"].tolist() == [[0]]


def test_string_corrid_is_one_bytes_element_and_unbatched_models_get_no_batch_dim() -> None:
    base = BASE.replace("max_batch_size: 4", "max_batch_size: 0")
    body = (
        'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_STRING } ] } ]"
    )
    spec = sequence_spec(config(body, base))
    assert spec is not None and not spec.batched and spec.slots == 1
    tensors = control_tensors(spec, 0, "e333c95a")
    assert tensors["C"].shape == (1,) and tensors["C"][0] == b"e333c95a"


# --- batch policies -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Head:
    sig: str = "INPUT:[1, 1]"
    arrival_us: float = 0.0


def spec_of(body: str):  # type: ignore[no-untyped-def]
    spec = sequence_spec(config(body))
    assert spec is not None
    return spec


def test_direct_keeps_each_sequence_in_its_slot_with_padding_between() -> None:
    spec = spec_of("direct { }")
    plan = plan_direct({0: ("a", Head()), 2: ("c", Head())}, 10.0, spec)
    assert plan.slots == ["a", None, "c"]
    # A step of another shape waits for the next execution; its slot is padding now.
    plan = plan_direct({0: ("a", Head()), 1: ("b", Head(sig="INPUT:[1, 2]"))}, 10.0, spec)
    assert plan.slots == ["a"]


def test_direct_waits_for_slot_utilization_or_the_delay() -> None:
    spec = spec_of("direct { max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 }")
    plan = plan_direct({3: ("d", Head(arrival_us=1000.0))}, 1050.0, spec)
    assert plan.slots == [] and plan.wake_at_us == 1100.0
    assert plan_direct({3: ("d", Head(arrival_us=1000.0))}, 1101.0, spec).slots[-1] == "d"
    two = {0: ("a", Head(arrival_us=1000.0)), 1: ("b", Head(arrival_us=1000.0))}
    assert plan_direct(two, 1001.0, spec).slots == ["a", "b"]  # 2/4 slots ready


def test_oldest_batches_like_the_dynamic_batcher() -> None:
    spec = spec_of("oldest { max_candidate_sequences: 8 preferred_batch_size: [ 2 ] }")
    heads = [Head(arrival_us=float(i)) for i in range(3)]
    assert plan_oldest(heads, 5.0, spec).take == 2  # a preferred size
    spec = spec_of("oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 100 }")
    waiting = plan_oldest(heads, 50.0, spec)
    assert waiting.take == 0 and waiting.wake_at_us == 100.0
    assert plan_oldest(heads, 100.0, spec).take == 3
    full = [Head(arrival_us=float(i)) for i in range(6)]
    assert plan_oldest(full, 1.0, spec).take == 4  # max_batch_size, at once
    mixed = [Head(), Head(sig="other"), Head()]
    assert plan_oldest(mixed, 1000.0, spec).take == 1


# --- state codec --------------------------------------------------------------------------------


def test_initial_states_and_the_committed_bytes(tmp_path: Path) -> None:
    body = """state [
      { input_name: "A" output_name: "A_OUT" data_type: TYPE_INT32 dims: [ -1, 3 ] },
      { input_name: "B" output_name: "B_OUT" data_type: TYPE_FP32 dims: [ 2 ]
        initial_state: { data_type: TYPE_FP32 dims: [ 2 ] data_file: "b.bin" name: "from file" } }
    ]"""
    spec = spec_of(body)
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "b.bin").write_bytes(np.array([1.5, -2], "<f4").tobytes())
    first, second = spec.states
    a = state_codec.initial_state(first, True, tmp_path)
    assert a.shape == (1, 1, 3) and a.dtype == np.int32 and not a.any()
    b = state_codec.initial_state(second, True, tmp_path)
    assert b.tolist() == [[1.5, -2.0]]
    data, shape = state_codec.encode(second, b)
    assert shape == "1,2" and len(data) == 8
    assert state_codec.decode(second, data, shape).tolist() == [[1.5, -2.0]]
    assert state_codec.normalize(first, np.ones((1, 1, 3), np.int64)).dtype == np.int32


def test_direct_slots_are_kept_while_held_and_reused_when_free() -> None:
    positions: dict[str, int] = {}
    assert [assign_slot(positions, s, 2) for s in ("a", "b", "a")] == [0, 1, 0]
    assert assign_slot(positions, "c", 2) == 4  # no free slot: waits beyond the slots
    del positions["a"]
    assert assign_slot(positions, "c", 2) == 0  # takes the freed one


def test_a_bell_for_a_new_sequence_with_the_id_of_one_ending_here_is_not_lost() -> None:
    """Regression: the END of sequence 7 is committing (its step 100 was the last) when the
    client's START of a new sequence 7 is admitted (step 1 of a new binding) and its bell comes
    in. The holder used to drop the bell (1 <= 100 steps seen) and then forget the sequence on
    the release: the START waited for a reconcile tick (up to seconds)."""
    import asyncio

    from workers.sequence.holder import SequenceHolder

    holder = object.__new__(SequenceHolder)
    holder.heads, holder.cache, holder.positions, holder.dirty = {}, {}, {}, {}
    holder.known, holder._serial, holder.wake = {"u:7": 100}, 0, asyncio.Event()
    holder.cache["u:7"] = (99, {})
    holder._ring("u:7", 1, None)  # the new sequence's START, while the END commits
    holder.forget("u:7")  # the END's commit result: released
    assert "u:7" in holder.dirty and holder.wake.is_set()

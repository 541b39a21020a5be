"""Triton's load-time rules for ``sequence_batching``, with Triton's own messages.

From ``model_config_utils.cc`` (``ValidateModelConfig``, ``GetBooleanSequenceControlProperties``,
``GetTypedSequenceControlProperties``) and ``SequenceBatchScheduler::GenerateInitialStateData``,
so a repository Triton refuses is refused here with the same words (prefixed with the file).
"""

from __future__ import annotations

from typing import Any

from shared.model_config.structs import ModelConfig
from shared.wire.errors import invalid

_BOOLEAN_KINDS = ("CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_READY")
_CORRID = "CONTROL_SEQUENCE_CORRID"
_CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
_FALSE_TRUE = ("int32_false_true", "fp32_false_true", "bool_false_true")


def check_sequence_batching(config: ModelConfig, source: str) -> None:
    batcher = config.sequence_batching
    if batcher is None:
        return
    name = config.name

    def fail(message: str) -> None:
        raise invalid(f"{source}: {message}")

    if (config.json.get("response_cache") or {}).get("enable"):
        fail(
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    controls: list[dict[str, Any]] = batcher.get("control_input", [])
    for kind in (*_BOOLEAN_KINDS, _CORRID):
        _check_kind(controls, kind, name, fail)
    for control_input in controls:
        for control in control_input.get("control", []):
            if control.get("kind") == _CORRID and control.get("data_type") not in _CORRID_TYPES:
                fail(
                    f"unexpected data type for control {_CORRID} for {name}. Allowed data types "
                    "are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                )
    oldest = batcher.get("oldest")
    if oldest is not None:
        for size in oldest.get("preferred_batch_size", []):
            if size <= 0:
                fail(f"sequence batching preferred batch size must be positive for {name}")
            if size > config.max_batch_size:
                fail(f"sequence batching preferred batch size must be <= max batch size for {name}")
    direct = batcher.get("direct")
    if direct is not None:
        utilization = float(direct.get("minimum_slot_utilization", 0.0))
        if not 0.0 <= utilization <= 1.0:
            fail(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
            )
    seen_states: set[str] = set()
    for state in batcher.get("state", []):
        _check_state(state, seen_states, fail)


def _check_kind(controls: list[dict[str, Any]], kind: str, model: str, fail: Any) -> None:
    """One control kind: named tensors, each used once, the kind given once, its values right."""
    seen_tensors: set[str] = set()
    seen_kind = False
    for control_input in controls:
        tensor = control_input.get("name", "")
        if not tensor:
            fail(f"sequence batching control tensor must have a name for {model}")
        if tensor in seen_tensors:
            fail(
                f"sequence batching control tensor '{tensor}' is specified for multiple control "
                f"kinds for {model}"
            )
        seen_tensors.add(tensor)
        for control in control_input.get("control", []):
            if control.get("kind", "CONTROL_SEQUENCE_START") != kind:
                continue
            if seen_kind:
                fail(f"sequence batching specifies multiple {kind} tensors for {model}")
            seen_kind = True
            given = [f for f in _FALSE_TRUE if control.get(f)]
            if kind == _CORRID:
                if given:
                    fail(
                        "sequence batching must not specify either 'int32_false_true', "
                        f"'fp32_false_true' or 'bool_false_true' for {kind} for {model}"
                    )
                continue
            if not given:
                fail(
                    "sequence batching must specify either 'int32_false_true', "
                    f"'fp32_false_true' or 'bool_false_true' for {kind} for {model}"
                )
            if len(given) > 1:
                fail(
                    "sequence batching specifies more than one from 'int32_false_true', "
                    f"'fp32_false_true' and 'bool_false_true' for {kind} for {model}"
                )
            if len(control[given[0]]) != 2:
                fail(
                    f"sequence batching control '{given[0]}' must have exactly 2 entries for "
                    f"{kind} for {model}"
                )


def _check_state(state: dict[str, Any], seen: set[str], fail: Any) -> None:
    """``GenerateInitialStateData``'s checks of one implicit state."""
    input_name = state.get("input_name", "")
    initial_states = state.get("initial_state", [])
    if len(initial_states) > 1:
        fail(
            f"initial_state field for state input '{input_name}' must contain exactly one or "
            f"zero element. Found '{len(initial_states)}' elements."
        )
    if not initial_states:
        return
    initial = initial_states[0]
    if initial.get("data_type") != state.get("data_type"):
        fail(
            f"The data type used for 'initial_state' field of state '{input_name}' does not "
            "match the state data type."
        )
    if not initial.get("name"):
        fail(f"Field 'name' must be set when using initial_state for state input '{input_name}'.")
    if input_name in seen:
        fail(f"State input name '{input_name}' specified more than once.")
    seen.add(input_name)
    dims, state_dims = initial.get("dims", []), state.get("dims", [])
    if len(dims) != len(state_dims):
        fail(
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' "
            f"dimensions for state input '{input_name}'. {len(dims)} != {len(state_dims)}"
        )
    for dim, state_dim in zip(dims, state_dims, strict=True):
        if dim == -1:
            fail(
                f"'initial_state' field for state input name '{input_name}' contains variable "
                "dimensions."
            )
        if state_dim != -1 and dim != state_dim:
            fail(
                f"'initial_state' dim for input name '{input_name}' doesn't match 'state' dim "
                f"description. {dim} != {state_dim}"
            )
    if not initial.get("zero_data") and not initial.get("data_file"):
        fail(f"initial_state setting expects state'{input_name}' to have state_data set")

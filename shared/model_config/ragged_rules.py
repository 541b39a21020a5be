"""Load-time checks of ragged batching (``batch_input``, ``batch_output``) and of what
``dynamic_batching.preserve_ordering`` cannot promise (a decoupled model's streams).

The worker computes every ``batch_input`` kind Triton defines (``workers.batches.ragged``) and
scatters ``BATCH_SCATTER_WITH_INPUT_SHAPE`` outputs; what it cannot compute is refused here, with
the field named.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.model_config.structs import ModelConfig
from shared.wire.errors import invalid

BATCH_INPUT_KINDS = (
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
)
BATCH_INPUT_DATATYPES = ("INT32", "INT64", "FP32")
SCATTER = "BATCH_SCATTER_WITH_INPUT_SHAPE"


def check_ragged(config: ModelConfig, source: str) -> None:
    def fail(field: str, message: str) -> None:
        raise invalid(f"{source}: model '{config.name}': field '{field}' {message}")

    field = "batch_input" if config.batch_inputs else "batch_output"
    if (config.batch_inputs or config.batch_outputs) and config.max_batch_size <= 0:
        fail(field, "is set with max_batch_size 0; expected a batching model (max_batch_size > 0)")
    if (config.batch_inputs or config.batch_outputs) and config.sequence_batching is not None:
        fail(
            field,
            "is set on a sequence_batching model; Conch computes batch inputs for the dynamic "
            "batcher only (expected dynamic_batching, or no batch_input/batch_output)",
        )
    for entry in config.batch_inputs:
        if entry.kind not in BATCH_INPUT_KINDS:
            fail("batch_input.kind", f"is {entry.kind}; expected one of {list(BATCH_INPUT_KINDS)}")
        if entry.datatype not in BATCH_INPUT_DATATYPES:
            fail(
                "batch_input.data_type",
                f"of {entry.target_name} is {entry.datatype}; expected TYPE_INT32, TYPE_INT64 "
                "or TYPE_FP32",
            )
        if not entry.target_name or any(not t for t in entry.target_name):
            fail("batch_input.target_name", "is empty; expected the model input it fills")
        for target in entry.target_name:
            if config.input(target) is not None:
                fail(
                    "batch_input.target_name",
                    f"'{target}' is also a configured input; a batch input is computed by the "
                    "server, not sent by clients",
                )
        _one_source(config, "batch_input", entry.source_input, fail)
    batching = config.dynamic_batching
    if batching is not None and batching.preserve_ordering and config.decoupled:
        fail(
            "dynamic_batching.preserve_ordering",
            "is true on a decoupled model; Conch orders the responses of non-decoupled models "
            "only (expected false, or model_transaction_policy without decoupled)",
        )
    outputs = set(config.output_names)
    for out in config.batch_outputs:
        if out.kind != SCATTER:
            fail("batch_output.kind", f"is {out.kind}; expected {SCATTER}")
        for target in out.target_name:
            if target not in outputs:
                fail(
                    "batch_output.target_name",
                    f"names '{target}', which is not an output; expected one of {sorted(outputs)}",
                )
        _one_source(config, "batch_output", out.source_input, fail)


def _one_source(
    config: ModelConfig, section: str, names: list[str], fail: Callable[[str, str], None]
) -> None:
    if len(names) != 1:
        fail(f"{section}.source_input", f"is {names}; expected exactly one input name")
    elif config.input(names[0]) is None:
        fail(
            f"{section}.source_input",
            f"names '{names[0]}', which is not an input; expected one of {config.input_names}",
        )

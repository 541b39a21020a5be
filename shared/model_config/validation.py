"""The rules Triton checks when it loads a configuration, with messages that name the field.

A message says which file and model, which field, what it holds and what was expected, so that a
broken repository is fixed from the error alone.
"""

from __future__ import annotations

from shared.model_config.ragged_rules import check_ragged
from shared.model_config.rate_limiter import check_rate_limiters, check_shape_tensors
from shared.model_config.sequence_rules import check_sequence_batching
from shared.model_config.structs import ModelConfig
from shared.wire.errors import invalid


def validate(config: ModelConfig, source: str) -> None:
    def fail(field: str, message: str) -> None:
        raise invalid(f"{source}: model '{config.name}': field '{field}' {message}")

    if not config.name:
        fail("name", "is empty; expected the model's name")
    if config.max_batch_size < 0:
        fail("max_batch_size", f"is {config.max_batch_size}; expected 0 or more")
    if not config.backend and config.platform != "ensemble":
        fail("platform", "and 'backend' are both empty; expected e.g. platform 'onnxruntime_onnx'")
    for kind, specs in (("input", config.inputs), ("output", config.outputs)):
        seen: set[str] = set()
        for spec in specs:
            if not spec.name:
                fail(kind, "has an entry without a name")
            if spec.name in seen:
                fail(kind, f"names '{spec.name}' twice")
            seen.add(spec.name)
            if any(d < -1 or d == 0 for d in spec.dims):
                fail(f"{kind}.dims", f"of '{spec.name}' is {spec.dims}; expected sizes >= 1 or -1")
    batching = config.dynamic_batching
    if batching is not None:
        for size in batching.preferred_batch_size:
            if size < 1 or size > max(config.max_batch_size, 1):
                fail(
                    "dynamic_batching.preferred_batch_size",
                    f"has {size}; expected 1..max_batch_size ({config.max_batch_size})",
                )
        levels = batching.priority_levels
        if batching.preserve_ordering and levels > 1:
            fail(
                "dynamic_batching.preserve_ordering",
                f"is true with {levels} priority levels; Triton allows it only without priorities",
            )
        if levels and not 1 <= batching.default_priority_level <= levels:
            fail(
                "dynamic_batching.default_priority_level",
                f"is {batching.default_priority_level}; expected 1..{levels}",
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= max(levels, 1):
                fail(
                    "dynamic_batching.priority_queue_policy",
                    f"has level {level}; expected 1..priority_levels ({levels})",
                )
    for group in config.instance_groups:
        if group.count < 1:
            fail("instance_group.count", f"is {group.count}; expected 1 or more")
    check_sequence_batching(config, source)
    check_ragged(config, source)
    check_rate_limiters(config, source)
    check_shape_tensors(config, source)

"""The typed model configuration Conch's services act on, with Triton's field names.

Frozen msgspec structs, so one parsed configuration is shared by every task that reads it. The
fields the hot paths read are typed; sections read rarely stay in Triton's JSON form, and the
whole configuration is kept in that form too (``json``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.model_config.defaults import DEFAULT_MODEL_FILENAMES


class TensorSpec(msgspec.Struct, frozen=True):
    name: str
    datatype: str  # KServe v2 name, e.g. "INT32"
    dims: list[int]
    reshape: list[int] | None = None
    optional: bool = False
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False


class BatchInput(msgspec.Struct, frozen=True):
    """``batch_input``: a tensor the worker computes from the formed batch (ragged batching)."""

    kind: str  # e.g. "BATCH_ACCUMULATED_ELEMENT_COUNT"
    target_name: list[str]
    datatype: str  # KServe v2 name
    source_input: list[str]


class BatchOutput(msgspec.Struct, frozen=True):
    """``batch_output``: an output split back per request in a way other than by batch rows."""

    kind: str  # "BATCH_SCATTER_WITH_INPUT_SHAPE"
    target_name: list[str]
    source_input: list[str]


class QueuePolicy(msgspec.Struct, frozen=True):
    timeout_action: str = "REJECT"  # or "DELAY"
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


class DynamicBatching(msgspec.Struct, frozen=True):
    preferred_batch_size: list[int] = []
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = QueuePolicy()
    priority_queue_policy: dict[int, QueuePolicy] = {}

    def queue_policy(self, level: int) -> QueuePolicy:
        return self.priority_queue_policy.get(level, self.default_queue_policy)


class InstanceGroup(msgspec.Struct, frozen=True):
    name: str
    kind: str  # KIND_AUTO | KIND_CPU | KIND_GPU | KIND_MODEL
    count: int
    gpus: list[int] = []


class VersionPolicy(msgspec.Struct, frozen=True):
    kind: str = "latest"  # latest | all | specific
    num_versions: int = 1
    versions: list[int] = []

    def select(self, available: list[int]) -> list[int]:
        """The versions to load, from those present on disk (Triton's rules)."""
        ordered = sorted(available)
        if self.kind == "all":
            return ordered
        if self.kind == "specific":
            return [v for v in ordered if v in set(self.versions)]
        return ordered[-self.num_versions :] if self.num_versions > 0 else []


class ModelConfig(msgspec.Struct, frozen=True):
    name: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    version_policy: VersionPolicy
    instance_groups: list[InstanceGroup]
    dynamic_batching: DynamicBatching | None
    parameters: dict[str, str]
    default_model_filename: str
    # Sections read where they are used (ensemble steps, warmup samples, execution
    # accelerators), kept in Triton's JSON form.
    sequence_batching: dict[str, Any] | None = None
    ensemble_scheduling: dict[str, Any] | None = None
    model_warmup: list[dict[str, Any]] = []
    optimization: dict[str, Any] | None = None
    # Ragged batching: tensors computed from the formed batch, outputs scattered by input shape.
    batch_inputs: list[BatchInput] = []
    batch_outputs: list[BatchOutput] = []
    # The whole configuration in Triton's JSON form (what /config returns).
    json: dict[str, Any] = {}

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def input(self, name: str) -> TensorSpec | None:
        for spec in self.inputs:  # a handful of entries: a scan beats building a dict
            if spec.name == name:
                return spec
        return None

    def output(self, name: str) -> TensorSpec | None:
        for spec in self.outputs:
            if spec.name == name:
                return spec
        return None

    @property
    def decoupled(self) -> bool:
        """``model_transaction_policy { decoupled: true }``: zero or more responses a request."""
        policy = self.json.get("model_transaction_policy") or {}
        return bool(policy.get("decoupled", False))

    @property
    def instance_count(self) -> int:
        return sum(group.count for group in self.instance_groups) or 1

    @property
    def model_filename(self) -> str:
        return self.default_model_filename or DEFAULT_MODEL_FILENAMES.get(self.backend, "")

    def priority_levels(self) -> list[int]:
        """The priority levels requests of this model are queued at (1 is highest)."""
        levels = self.dynamic_batching.priority_levels if self.dynamic_batching else 0
        return list(range(1, levels + 1)) if levels > 0 else [1]

    def default_priority(self) -> int:
        batching = self.dynamic_batching
        if batching and batching.priority_levels > 0:
            return batching.default_priority_level or 1
        return 1

    def to_json(self) -> dict[str, Any]:
        return self.json

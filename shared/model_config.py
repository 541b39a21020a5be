"""Triton's ``config.pbtxt`` read into a typed configuration, with Triton's names and defaults.

Parsing uses Triton's own schema (``model_config.proto`` as shipped in tritonclient), so a real
Triton repository loads unchanged and an unknown field is an error naming the file, line and
field. The typed :class:`ModelConfig` holds what Conch's services act on; ``to_json`` gives the
JSON form that Triton's ``/v2/models/{m}/config`` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor
from tritonclient.grpc import model_config_pb2 as pb

from shared import datatypes
from shared.errors import invalid

CONFIG_FILENAME = "config.pbtxt"

# Triton's platform strings and the backend that serves each.
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "pytorch_torch_export": "pytorch",
    "tensorrt_plan": "tensorrt",
    "ensemble": "ensemble",
}
BACKEND_PLATFORMS = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
# File names Triton looks for when default_model_filename is unset.
DEFAULT_MODEL_FILENAMES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
}


class TensorSpec(msgspec.Struct, frozen=True):
    name: str
    datatype: str  # KServe v2 name, e.g. "INT32"
    dims: list[int]
    reshape: list[int] | None = None
    optional: bool = False
    is_shape_tensor: bool = False
    allow_ragged_batch: bool = False


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
    # Parsed now, used by later features; kept in Triton's JSON form.
    sequence_batching: dict[str, Any] | None = None
    ensemble_scheduling: dict[str, Any] | None = None
    model_warmup: list[dict[str, Any]] = []
    optimization: dict[str, Any] | None = None
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


def parse_pbtxt(text: str, source: str = CONFIG_FILENAME, default_name: str = "") -> ModelConfig:
    """Parse a config.pbtxt; errors name the file, the line and column, and the field."""
    message = pb.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise invalid(f"{source}:{exc}") from None
    if not message.name:
        message.name = default_name
    return _from_message(message, source)


def from_json(data: Mapping[str, Any], source: str = "config") -> ModelConfig:
    """Build a configuration from Triton's JSON form (registry entries, load overrides)."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(dict(data), message)
    except json_format.ParseError as exc:
        raise invalid(f"{source}: {exc}") from None
    return _from_message(message, source)


def load(model_dir: str | Path) -> ModelConfig:
    """Read ``<model_dir>/config.pbtxt``; the model's name defaults to the directory's."""
    model_dir = Path(model_dir)
    path = model_dir / CONFIG_FILENAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise invalid(f"{path}: no {CONFIG_FILENAME} in model directory '{model_dir}'") from None
    config = parse_pbtxt(text, str(path), default_name=model_dir.name)
    if config.name != model_dir.name:
        raise invalid(
            f"{path}: field 'name' is '{config.name}' but the model directory is "
            f"'{model_dir.name}'; Triton requires them to match"
        )
    return config


def _from_message(message: pb.ModelConfig, source: str) -> ModelConfig:
    _fill_defaults(message)
    raw = _message_to_json(message)
    config = ModelConfig(
        name=message.name,
        platform=message.platform,
        backend=message.backend,
        max_batch_size=message.max_batch_size,
        inputs=[_tensor(t, "input", source) for t in message.input],
        outputs=[_tensor(t, "output", source) for t in message.output],
        version_policy=_version_policy(message),
        instance_groups=[
            InstanceGroup(
                name=g.name,
                kind=pb.ModelInstanceGroup.Kind.Name(g.kind),
                count=g.count,
                gpus=list(g.gpus),
            )
            for g in message.instance_group
        ],
        dynamic_batching=(
            _dynamic_batching(message.dynamic_batching)
            if message.HasField("dynamic_batching")
            else None
        ),
        parameters={k: v.string_value for k, v in message.parameters.items()},
        default_model_filename=message.default_model_filename,
        sequence_batching=raw.get("sequence_batching")
        if message.HasField("sequence_batching")
        else None,
        ensemble_scheduling=raw.get("ensemble_scheduling")
        if message.HasField("ensemble_scheduling")
        else None,
        model_warmup=raw.get("model_warmup", []),
        optimization=raw.get("optimization") if message.HasField("optimization") else None,
        json=raw,
    )
    _validate(config, source)
    return config


def _fill_defaults(message: pb.ModelConfig) -> None:
    """Triton's normalisation: backend from platform, one instance group, latest version."""
    if not message.backend and message.platform in PLATFORM_BACKENDS:
        message.backend = PLATFORM_BACKENDS[message.platform]
    if not message.platform and message.backend in BACKEND_PLATFORMS:
        message.platform = BACKEND_PLATFORMS[message.backend]
    if not message.HasField("version_policy"):
        message.version_policy.latest.num_versions = 1
    if message.platform != "ensemble" and not message.instance_group:
        message.instance_group.add()
    for index, group in enumerate(message.instance_group):
        if not group.name:
            group.name = f"{message.name}_{index}"
        if group.count == 0:
            group.count = 1
    if message.HasField("dynamic_batching"):
        batching = message.dynamic_batching
        if batching.priority_levels and not batching.default_priority_level:
            batching.default_priority_level = batching.priority_levels
        if not batching.preferred_batch_size and message.max_batch_size > 0:
            batching.preferred_batch_size.append(message.max_batch_size)
    if message.HasField("sequence_batching"):
        sequence = message.sequence_batching
        if not sequence.max_sequence_idle_microseconds:
            sequence.max_sequence_idle_microseconds = 1_000_000


def _tensor(spec: Any, kind: str, source: str) -> TensorSpec:
    type_name = pb.DataType.Name(spec.data_type)
    if type_name == "TYPE_INVALID":
        raise invalid(f"{source}: {kind} '{spec.name}' has no field 'data_type' (expected TYPE_*)")
    return TensorSpec(
        name=spec.name,
        datatype=datatypes.from_config_name(type_name).name,
        dims=list(spec.dims),
        reshape=list(spec.reshape.shape) if spec.HasField("reshape") else None,
        optional=getattr(spec, "optional", False),
        is_shape_tensor=spec.is_shape_tensor,
        allow_ragged_batch=getattr(spec, "allow_ragged_batch", False),
    )


def _version_policy(message: pb.ModelConfig) -> VersionPolicy:
    policy = message.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return VersionPolicy(kind="all")
    if choice == "specific":
        return VersionPolicy(kind="specific", versions=list(policy.specific.versions))
    return VersionPolicy(kind="latest", num_versions=policy.latest.num_versions or 1)


def _queue_policy(policy: Any) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=pb.ModelQueuePolicy.TimeoutAction.Name(policy.timeout_action),
        default_timeout_microseconds=policy.default_timeout_microseconds,
        allow_timeout_override=policy.allow_timeout_override,
        max_queue_size=policy.max_queue_size,
    )


def _dynamic_batching(batching: Any) -> DynamicBatching:
    return DynamicBatching(
        preferred_batch_size=list(batching.preferred_batch_size),
        max_queue_delay_microseconds=batching.max_queue_delay_microseconds,
        preserve_ordering=batching.preserve_ordering,
        priority_levels=batching.priority_levels,
        default_priority_level=batching.default_priority_level,
        default_queue_policy=_queue_policy(batching.default_queue_policy),
        priority_queue_policy={
            int(level): _queue_policy(p) for level, p in batching.priority_queue_policy.items()
        },
    )


def _validate(config: ModelConfig, source: str) -> None:
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


def _message_to_json(message: Any) -> dict[str, Any]:
    """Triton's JSON form: proto field names, every field printed, 64-bit integers as numbers."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _int64_to_numbers(data, message.DESCRIPTOR)


_INT64_TYPES = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def _int64_to_numbers(data: Any, descriptor: Any) -> Any:
    if not isinstance(data, dict):
        return data
    for field in descriptor.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                data[field.name] = {
                    k: _int64_to_numbers(v, value_field.message_type) for k, v in value.items()
                }
            elif value_field.type in _INT64_TYPES:
                data[field.name] = {k: int(v) for k, v in value.items()}
        elif field.message_type is not None:
            if isinstance(value, list):
                data[field.name] = [_int64_to_numbers(v, field.message_type) for v in value]
            else:
                data[field.name] = _int64_to_numbers(value, field.message_type)
        elif field.type in _INT64_TYPES:
            data[field.name] = [int(v) for v in value] if isinstance(value, list) else int(value)
    return data

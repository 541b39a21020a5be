"""``config.pbtxt`` (or Triton's JSON form) read into a :class:`ModelConfig`.

Parsing uses Triton's own schema (``model_config.proto`` as shipped in tritonclient), so a real
Triton repository loads unchanged and an unknown field is an error naming the file, line and
field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as pb

from shared.model_config.auto_complete import detect, fill_platform
from shared.model_config.defaults import fill_defaults
from shared.model_config.json_form import message_to_json
from shared.model_config.structs import (
    BatchInput,
    BatchOutput,
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorSpec,
    VersionPolicy,
)
from shared.model_config.validation import validate
from shared.wire import datatypes
from shared.wire.errors import invalid

CONFIG_FILENAME = "config.pbtxt"


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


def from_json(
    data: Mapping[str, Any], source: str = "config", model_dir: Path | None = None
) -> ModelConfig:
    """Build a configuration from Triton's JSON form (registry entries, load overrides). With
    ``model_dir``, a missing platform/backend is read off the model files (auto-complete)."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(dict(data), message)
    except json_format.ParseError as exc:
        raise invalid(f"{source}: {exc}") from None
    if model_dir is not None:
        if not message.name:
            message.name = model_dir.name
        fill_platform(message, model_dir)
    return _from_message(message, source)


def load(model_dir: str | Path, auto_complete: bool = True, config_name: str = "") -> ModelConfig:
    """Read ``<model_dir>/config.pbtxt``; the model's name defaults to the directory's. With
    ``auto_complete`` (Triton's default), a missing file or platform is read off the model
    files; the backend completes inputs and outputs when it loads the model. ``config_name``
    is Triton's ``--model-config-name``: ``<model_dir>/configs/<name>.pbtxt`` where it exists,
    else config.pbtxt."""
    model_dir = Path(model_dir)
    path = config_path(model_dir, config_name)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if not auto_complete or detect(model_dir) is None:
            raise invalid(
                f"{path}: no {CONFIG_FILENAME} in model directory '{model_dir}'"
            ) from None
        text = ""
    message = pb.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise invalid(f"{path}:{exc}") from None
    if not message.name:
        message.name = model_dir.name
    if auto_complete:
        fill_platform(message, model_dir)
    config = _from_message(message, str(path))
    if config.name != model_dir.name:
        raise invalid(
            f"{path}: field 'name' is '{config.name}' but the model directory is "
            f"'{model_dir.name}'; Triton requires them to match"
        )
    return config


def config_path(model_dir: Path, config_name: str = "") -> Path:
    """The configuration file Triton reads for the model: the named alternative if present."""
    if config_name:
        alternative = model_dir / "configs" / f"{config_name}.pbtxt"
        if alternative.is_file():
            return alternative
    return model_dir / CONFIG_FILENAME


def _from_message(message: pb.ModelConfig, source: str) -> ModelConfig:
    fill_defaults(message)
    raw = message_to_json(message)
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
        batch_inputs=[_batch_input(b, source) for b in message.batch_input],
        batch_outputs=[
            BatchOutput(
                kind=pb.BatchOutput.Kind.Name(b.kind),
                target_name=list(b.target_name),
                source_input=list(b.source_input),
            )
            for b in message.batch_output
        ],
        json=raw,
    )
    validate(config, source)
    return config


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


def _batch_input(spec: Any, source: str) -> BatchInput:
    type_name = pb.DataType.Name(spec.data_type)
    if type_name == "TYPE_INVALID":
        raise invalid(
            f"{source}: batch_input {list(spec.target_name)} has no field 'data_type' "
            "(expected TYPE_INT32, TYPE_INT64 or TYPE_FP32)"
        )
    return BatchInput(
        kind=pb.BatchInput.Kind.Name(spec.kind),
        target_name=list(spec.target_name),
        datatype=datatypes.from_config_name(type_name).name,
        source_input=list(spec.source_input),
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

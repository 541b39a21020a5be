"""The parameters of a repository load request (Triton's model repository extension): a
``config`` override in Triton's JSON form and ``file:<path>`` model files (base64 over HTTP,
bytes over gRPC), checked before anything reaches the fleet."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from gateway.core.json_depth import check_json_depth
from shared.model_config.json_form import decode_override
from shared.storage import model_files
from shared.storage.model_paths import confined
from shared.wire.errors import invalid


@dataclass(frozen=True)
class LoadRequest:
    config: dict[str, Any] | None = None
    # Relative path (normalized) -> file bytes.
    files: dict[str, bytes] = field(default_factory=dict)


def load_request(model: str, parameters: dict[str, Any], max_bytes: int) -> LoadRequest:
    """The override and files a load asks for; errors start "failed to load" where Triton's do
    (clients match on it)."""
    config: dict[str, Any] | None = None
    files: dict[str, bytes] = {}
    total = 0
    for name, value in parameters.items():
        if name == "config":
            config = _config(model, value)
        elif name.startswith(model_files.PREFIX):
            path = model_files.normalized(model, name)
            data = _file_bytes(name, value)
            total += len(data)
            if total > max_bytes:
                raise invalid(
                    f"failed to load '{model}': the model files sent exceed {max_bytes} bytes "
                    "(CONCH_GATEWAY_MAX_UPLOAD_BYTES)"
                )
            files[path] = data
        else:
            raise invalid(
                f"failed to load '{model}': Unrecognized load parameter '{name}' with type "
                f"'{_type_name(value)}'"
            )
    return LoadRequest(config, files)


def _config(model: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bytes | str):
        check_json_depth(value, f"the config override of '{model}'")
    value = decode_override(model, value)
    try:  # the shape of a ModelConfig; completeness is the worker's check (auto-complete)
        json_format.ParseDict(value, model_config_pb2.ModelConfig())
    except json_format.ParseError as exc:
        raise invalid(f"failed to load '{model}': Invalid config override: {exc}") from None
    _check_files_named(model, value)
    config = dict(value)
    config.setdefault("name", model)
    if config["name"] != model:
        raise invalid(
            f"failed to load '{model}': Invalid config override: field 'name' is "
            f"'{config['name']}' but the model is '{model}'"
        )
    return config


def _check_files_named(model: str, config: dict[str, Any]) -> None:
    """Files the override names stay inside the model directory (as workers check again)."""
    references = [("default_model_filename", config.get("default_model_filename"))]
    for index, setting in enumerate(config.get("model_warmup") or []):
        inputs = setting.get("inputs", {}) if isinstance(setting, dict) else {}
        for name, spec in inputs.items() if isinstance(inputs, dict) else ():
            if isinstance(spec, dict) and "input_data_file" in spec:
                field = f"model_warmup[{index}].inputs.{name}.input_data_file"
                references.append((field, spec["input_data_file"]))
    for field, reference in references:
        if reference and not confined(str(reference)):
            raise invalid(
                f"failed to load '{model}': field 'parameters.config.{field}' is {reference!r}: "
                "expected a file name inside the model's directory (no '..', not absolute)"
            )


def _file_bytes(name: str, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"File parameter '{name}' must be base64 encoded bytes") from None
    raise invalid(f"File parameter '{name}' must have bytes type for its value")


def _type_name(value: Any) -> str:
    return {bool: "BOOL", int: "INT", str: "STRING", bytes: "BYTES"}.get(type(value), "JSON")

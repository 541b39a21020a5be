"""Triton's JSON form of a configuration, as ``/v2/models/{m}/config`` returns it.

protobuf's JSON mapping prints 64-bit integers as strings; Triton prints them as numbers, so
they are turned back into numbers after the conversion.
"""

from __future__ import annotations

from typing import Any

import msgspec
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from shared.wire.errors import invalid


def message_to_json(message: Any) -> dict[str, Any]:
    """Triton's JSON form: proto field names, every field printed, 64-bit integers as numbers."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    converted: dict[str, Any] = _int64_to_numbers(data, message.DESCRIPTOR)
    return converted


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


def decode_override(model: str, value: Any) -> dict[str, Any]:
    """A load's config override (Triton's JSON form, as text or already decoded) as a dict, or
    the error Triton gives for it. The repository API and BLS ``load_model`` both take one."""
    if isinstance(value, bytes | str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            raise invalid(f"failed to load '{model}': Invalid config override: {exc}") from None
    if not isinstance(value, dict):
        raise invalid(
            f"failed to load '{model}': Invalid config override: expected a JSON object in "
            "Triton's model configuration form"
        )
    return value

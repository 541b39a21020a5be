"""The ``protoc-gen-validate`` rules that Envoy enforces, checked here before anything is sent.

Not PyPI's ``protoc-gen-validate``: its validator skips ``Any`` payloads (Envoy's
``typed_config``: the HTTP connection manager, its filters), which Envoy validates; nor
``protovalidate``: it reads ``buf.validate`` rules, which Envoy's protos do not carry.

Envoy rejects (NACKs) a resource that breaks one of the ``(validate.rules)`` annotations in its
API protos, e.g. a port above 65535 or an empty cluster name. Envoy then keeps its last good
config, but the fleet is stuck on a version the control plane believes is applied. Checking the
same annotations here, generically over the message descriptors (``Any`` payloads included),
lets a bad update be refused before its version is bumped, so Envoy never sees it.

Only the rules Envoy's own API uses are implemented; an unknown rule kind is ignored rather than
guessed at.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.descriptor import FieldDescriptor, OneofDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from validate import validate_pb2

_NUMERIC = {
    "float", "double", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64",
}  # fmt: skip
_WRAPPERS = {
    "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue",
}  # fmt: skip
_HEADER_NAME = re.compile(r"^:?[0-9a-zA-Z!#$%&'*+\-.^_|~`]+$")
_HEADER_VALUE = re.compile(r"^[^\x00\n\r]*$")


def validate(message: Message) -> list[str]:
    """Every rule violation in ``message`` and everything nested in it, as ``path: problem``."""
    return list(_message(message, message.DESCRIPTOR.name))


def _message(msg: Message, path: str) -> Iterator[str]:
    desc = msg.DESCRIPTOR
    if desc.full_name == "google.protobuf.Any":
        yield from _any_payload(msg, path)  # type: ignore[arg-type]  # full_name: an Any
        return
    for oneof in desc.oneofs:
        if _oneof_required(oneof) and msg.WhichOneof(oneof.name) is None:
            yield f"{path}: one of {oneof.name} is required"
    for field in desc.fields:
        rules = _rules(field)
        yield from _field(msg, field, rules, f"{path}.{field.name}")


def _rules(field: FieldDescriptor) -> validate_pb2.FieldRules | None:
    options = field.GetOptions()
    if options.HasExtension(validate_pb2.rules):
        return options.Extensions[validate_pb2.rules]
    return None


def _oneof_required(oneof: OneofDescriptor) -> bool:
    options = oneof.GetOptions()
    return bool(
        options.HasExtension(validate_pb2.required) and options.Extensions[validate_pb2.required]
    )


def _field(
    msg: Message, field: FieldDescriptor, rules: validate_pb2.FieldRules | None, path: str
) -> Iterator[str]:
    oneof = field.containing_oneof
    if oneof is not None and msg.WhichOneof(oneof.name) != field.name:
        return  # rules of an unselected oneof member do not apply
    value = getattr(msg, field.name)
    if _is_map(field):
        yield from _map(value, field, rules, path)
    elif _is_repeated(field):
        yield from _repeated(value, field, rules, path)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        present = msg.HasField(field.name)
        yield from _single_message(value, present, field, rules, path)
    elif rules is not None:
        yield from _scalar(value, rules, path)


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
        and _is_repeated(field)
    )


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf >= 6.31 deprecates ``label``; older releases have only ``label``.
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _single_message(
    value: Message,
    present: bool,
    field: FieldDescriptor,
    rules: validate_pb2.FieldRules | None,
    path: str,
) -> Iterator[str]:
    kind = rules.WhichOneof("type") if rules is not None else None
    if rules is not None and rules.message.required and not present:
        yield f"{path}: value is required"
    if kind == "duration" and rules is not None and rules.duration.required and not present:
        yield f"{path}: value is required"
    if kind == "any" and rules is not None and rules.any.required and not present:
        yield f"{path}: value is required"
    if not present:
        return
    full_name = field.message_type.full_name
    if full_name in _WRAPPERS and rules is not None and kind not in (None, "message"):
        yield from _scalar(value.value, rules, path)  # type: ignore[attr-defined]  # a wrapper
        return
    if kind == "duration" and rules is not None:
        yield from _duration(value, rules.duration, path)  # type: ignore[arg-type]  # a Duration
    if kind == "any" and rules is not None:
        yield from _any_rules(value, rules.any, path)  # type: ignore[arg-type]  # an Any message
    if rules is not None and rules.message.skip:
        return
    yield from _message(value, path)


def _repeated(
    values: Any, field: FieldDescriptor, rules: validate_pb2.FieldRules | None, path: str
) -> Iterator[str]:
    item_rules = None
    if rules is not None and rules.WhichOneof("type") == "repeated":
        rep = rules.repeated
        if rep.ignore_empty and len(values) == 0:
            return
        if rep.min_items and len(values) < rep.min_items:
            yield f"{path}: needs at least {rep.min_items} item(s), has {len(values)}"
        if rep.HasField("max_items") and len(values) > rep.max_items:
            yield f"{path}: allows at most {rep.max_items} item(s), has {len(values)}"
        if rep.HasField("items"):
            item_rules = rep.items
    for index, item in enumerate(values):
        item_path = f"{path}[{index}]"
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            yield from _single_message(item, True, field, item_rules, item_path)
        elif item_rules is not None:
            yield from _scalar(item, item_rules, item_path)


def _map(
    values: Any, field: FieldDescriptor, rules: validate_pb2.FieldRules | None, path: str
) -> Iterator[str]:
    if rules is not None and rules.WhichOneof("type") == "map":
        rule = rules.map
        if rule.min_pairs and len(values) < rule.min_pairs:
            yield f"{path}: needs at least {rule.min_pairs} entries, has {len(values)}"
    value_field = field.message_type.fields_by_name["value"]
    for key in values:
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            yield from _message(values[key], f"{path}[{key!r}]")


def _scalar(value: Any, rules: validate_pb2.FieldRules, path: str) -> Iterator[str]:
    kind = rules.WhichOneof("type")
    if kind in _NUMERIC:
        yield from _number(value, getattr(rules, kind), path)
    elif kind == "string":
        yield from _string(value, rules.string, path)
    elif kind == "bytes":
        rule = rules.bytes
        if rule.min_len and len(value) < rule.min_len:
            yield f"{path}: must be at least {rule.min_len} byte(s)"
    elif kind == "enum":
        rule = rules.enum
        if rule.HasField("const") and value != rule.const:
            yield f"{path}: must equal {rule.const}"
        allowed = getattr(rule, "in")
        if len(allowed) and value not in allowed:
            yield f"{path}: {value} is not one of {list(allowed)}"
        if value in rule.not_in:
            yield f"{path}: {value} is not allowed"
    elif kind == "bool" and rules.bool.HasField("const") and value != rules.bool.const:
        yield f"{path}: must be {rules.bool.const}"


def _number(value: float, rule: Any, path: str) -> Iterator[str]:
    if getattr(rule, "ignore_empty", False) and value == 0:
        return
    checks: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
        ("const", lambda bound: value == bound, "equal"),
        ("lt", lambda bound: value < bound, "be <"),
        ("lte", lambda bound: value <= bound, "be <="),
        ("gt", lambda bound: value > bound, "be >"),
        ("gte", lambda bound: value >= bound, "be >="),
    )
    for name, ok, words in checks:
        if rule.HasField(name) and not ok(getattr(rule, name)):
            yield f"{path}: {value} must {words} {getattr(rule, name)}"
    allowed = getattr(rule, "in")
    if len(allowed) and value not in allowed:
        yield f"{path}: {value} is not one of {list(allowed)}"
    if value in rule.not_in:
        yield f"{path}: {value} is not allowed"


def _string(value: str, rule: validate_pb2.StringRules, path: str) -> Iterator[str]:
    if rule.ignore_empty and value == "":
        return
    if rule.min_len and len(value) < rule.min_len:
        yield f"{path}: must be at least {rule.min_len} character(s)"
    if rule.HasField("max_len") and len(value) > rule.max_len:
        yield f"{path}: must be at most {rule.max_len} character(s)"
    if rule.min_bytes and len(value.encode()) < rule.min_bytes:
        yield f"{path}: must be at least {rule.min_bytes} byte(s)"
    if rule.HasField("max_bytes") and len(value.encode()) > rule.max_bytes:
        yield f"{path}: must be at most {rule.max_bytes} byte(s)"
    if rule.prefix and not value.startswith(rule.prefix):
        yield f"{path}: must start with {rule.prefix!r}"
    if rule.HasField("pattern") and not re.search(rule.pattern, value):
        yield f"{path}: {value!r} does not match {rule.pattern!r}"
    if len(getattr(rule, "in")) and value not in getattr(rule, "in"):
        yield f"{path}: {value!r} is not one of {list(getattr(rule, 'in'))}"
    if value in rule.not_in:
        yield f"{path}: {value!r} is not allowed"
    if rule.ip or rule.ipv4 or rule.ipv6:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            yield f"{path}: {value!r} is not an IP address"
    if rule.HasField("well_known_regex") and value:
        header_rules = {
            validate_pb2.HTTP_HEADER_NAME: _HEADER_NAME,
            validate_pb2.HTTP_HEADER_VALUE: _HEADER_VALUE,
        }
        pattern = header_rules.get(rule.well_known_regex)
        if pattern is not None and not pattern.match(value):
            yield f"{path}: {value!r} is not a valid HTTP header name/value"


def _duration(value: Duration, rule: validate_pb2.DurationRules, path: str) -> Iterator[str]:
    nanos = value.seconds * 1_000_000_000 + value.nanos
    checks: tuple[tuple[str, Callable[[int], bool], str], ...] = (
        ("lt", lambda b: nanos < b, "<"),
        ("lte", lambda b: nanos <= b, "<="),
        ("gt", lambda b: nanos > b, ">"),
        ("gte", lambda b: nanos >= b, ">="),
    )
    for name, ok, words in checks:
        if rule.HasField(name):
            bound = getattr(rule, name)
            if not ok(bound.seconds * 1_000_000_000 + bound.nanos):
                yield f"{path}: {value.ToJsonString()} must be {words} {bound.ToJsonString()}"


def _any_rules(value: AnyMessage, rule: validate_pb2.AnyRules, path: str) -> Iterator[str]:
    if len(getattr(rule, "in")) and value.type_url not in getattr(rule, "in"):
        yield f"{path}: type {value.type_url} is not allowed here"


def _any_payload(value: AnyMessage, path: str) -> Iterator[str]:
    """Envoy unpacks ``typed_config`` and validates it too, so this does the same."""
    name = value.type_url.rpartition("/")[2]
    try:
        desc = descriptor_pool.Default().FindMessageTypeByName(name)
    except KeyError:
        yield f"{path}: unknown type {value.type_url!r} (module not imported?)"
        return
    inner = message_factory.GetMessageClass(desc)()
    if not value.Unpack(inner):
        yield f"{path}: cannot unpack {value.type_url}"
        return
    yield from _message(inner, f"{path}<{desc.name}>")

"""Triton's trace extension mapped onto Conch's OpenTelemetry tracing.

Settings (``trace_level``, ``trace_rate``, ``trace_count``) are the fleet's, kept in Redis per
scope: "" for every model, or one model, whose settings fall back to the fleet's where unset (a
null value clears one). A gateway decides for each request whether to trace it: never at level
``OFF``; otherwise one request in ``trace_rate`` (counted per gateway process), while the scope's
``trace_count`` (fleet-wide, in Redis) lasts, -1 meaning no limit. The decision travels with the
request: the scheduler and worker continue a trace only when the gateway started one. Level
``TENSORS`` adds the inputs' names, datatypes and shapes (and the values of small tensors) to the
gateway's span.

Spans go where the OpenTelemetry environment sends them (``shared.runtime.tracing``): ``trace_mode``
is ``opentelemetry``, and ``trace_file`` cannot be set over the network (Triton's rule). With no
exporter configured the settings are kept and reported, and nothing is traced.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import msgspec
import redis.asyncio as aioredis

from shared import lua
from shared.fleet import change_feed
from shared.runtime import periodic, tracing
from shared.wire import keys, tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode, invalid

log = logging.getLogger(__name__)

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
FIELDS = ("trace_level", "trace_rate", "trace_count", "log_frequency")
NO_TRACE_FILE = "trace file location can not be updated through network protocol"
# Tensors with at most this many elements have their values in a TENSORS span.
TENSOR_VALUES_MAX = 64
_decode = msgspec.json.Decoder(dict[str, Any]).decode


def defaults(enabled: bool) -> dict[str, Any]:
    """The fleet's settings before any were set: what this process does without them."""
    return {
        "trace_level": ["TIMESTAMPS"] if enabled else ["OFF"],
        "trace_rate": "1" if enabled else "1000",
        "trace_count": "-1",
        "log_frequency": "0",
    }


def validated(request: dict[str, Any]) -> dict[str, Any]:
    """A request's settings, checked (Triton's texts); None values clear a setting."""
    found: dict[str, Any] = {}
    for name, value in request.items():
        if name == "trace_file":
            raise ConchError(ErrorCode.UNSUPPORTED, NO_TRACE_FILE)
        if name == "trace_mode":
            if value not in (None, "opentelemetry"):
                raise invalid("trace_mode cannot be changed: Conch traces with OpenTelemetry")
            continue
        if name not in FIELDS:
            raise invalid(f"unknown trace setting '{name}'; expected one of {', '.join(FIELDS)}")
        if value is None:
            found[name] = None
        elif name == "trace_level":
            found[name] = _levels(value)
        else:
            found[name] = str(_integer(name, value))
    return found


def _levels(value: Any) -> list[str]:
    levels = [value] if isinstance(value, str) else value
    if not isinstance(levels, list) or not all(isinstance(v, str) for v in levels) or not levels:
        raise invalid("Unable to parse 'trace_level': expected an array of strings")
    unknown = [v for v in levels if v not in LEVELS]
    if unknown:
        raise invalid(
            f"Unable to parse 'trace_level', got: {unknown[0]}; expected OFF, TIMESTAMPS or TENSORS"
        )
    if "OFF" in levels and len(levels) > 1:
        raise invalid("Expect only one trace level 'OFF' is specified")
    return [level for level in LEVELS if level in levels]


def _integer(name: str, value: Any) -> int:
    try:
        number = (
            int(value) if isinstance(value, str | int) and not isinstance(value, bool) else None
        )
    except ValueError:
        number = None
    low = -1 if name == "trace_count" else 0
    if number is None or not low <= number < 2**31:
        raise invalid(f"Unable to parse '{name}', got: {value}")
    return number


class TraceSettings:
    """One gateway process's copy of the fleet's trace settings, and its sampling counters."""

    def __init__(self, r: aioredis.Redis, refresh_interval_s: float = 1.0):
        self._redis = r
        self._interval = refresh_interval_s
        self._scopes: dict[str, dict[str, Any]] = {}
        self._counters: dict[str, int] = {}
        self._take = r.register_script(lua.TRACE_TAKE_ONE.source)

    async def refresh(self) -> None:
        raw = await self._redis.hgetall(keys.trace_settings())
        self._scopes = {_text(k): _decode(v) for k, v in raw.items()}

    async def run(self) -> None:
        """Follow the fleet's settings while this process traces (none to follow otherwise)."""
        if tracing.ENABLED:
            await periodic.every(self._interval, self.refresh, "trace settings")

    def effective(self, model: str | None) -> dict[str, Any]:
        merged = defaults(tracing.ENABLED)
        for scope in ("", model) if model else ("",):
            merged.update(
                {k: v for k, v in self._scopes.get(scope or "", {}).items() if v is not None}
            )
        return merged

    async def get(self, model: str | None) -> dict[str, Any]:
        await self.refresh()
        settings = self.effective(model)
        scope = self._scope_of(model, "trace_count")
        if settings["trace_count"] != "-1":
            left = await self._redis.get(keys.trace_remaining(scope))
            settings["trace_count"] = _text(left) if left is not None else settings["trace_count"]
        return {**settings, "trace_mode": "opentelemetry"}

    async def update(self, model: str | None, request: dict[str, Any]) -> dict[str, Any]:
        changes = validated(request)
        scope = model or ""
        await self.refresh()
        current = dict(self._scopes.get(scope, {}))
        current.update(changes)
        current = {k: v for k, v in current.items() if v is not None}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.trace_settings(), scope, msgspec.json.encode(current))
            if "trace_count" in changes:
                count = changes["trace_count"]
                if count is None or count == "-1":
                    pipe.delete(keys.trace_remaining(scope))
                else:
                    pipe.set(keys.trace_remaining(scope), count)
            await pipe.execute()
        await change_feed.announce(self._redis, change_feed.TRACE)
        return await self.get(model)

    async def sample(self, model: str) -> bool:
        """Whether to trace this request (only asked while this process traces at all)."""
        settings = self.effective(model)
        if settings["trace_level"] == ["OFF"]:
            return False
        rate = int(settings["trace_rate"])
        count = self._counters.get(model, 0)
        self._counters[model] = count + 1
        if rate <= 0 or count % rate:
            return False
        if settings["trace_count"] == "-1":
            return True
        scope = self._scope_of(model, "trace_count")
        try:
            return bool(await self._take(keys=[keys.trace_remaining(scope)]))
        except Exception:
            return False  # tracing never fails a request

    def tensor_attributes(self, model: str, inputs: list[Tensor]) -> dict[str, Any]:
        """The span attributes of level TENSORS (empty otherwise)."""
        if "TENSORS" not in self.effective(model)["trace_level"]:
            return {}
        found: dict[str, Any] = {}
        for tensor in inputs:
            prefix = f"input.{tensor.name}"
            found[f"{prefix}.datatype"] = tensor.datatype
            found[f"{prefix}.shape"] = str(tensor.shape)
            if tensors.element_count(tensor.shape) <= TENSOR_VALUES_MAX:
                with contextlib.suppress(Exception):
                    found[f"{prefix}.data"] = str(
                        tensors.bytes_to_json(tensor.data, tensor.datatype)
                    )
        return found

    def _scope_of(self, model: str | None, field: str) -> str:
        """The scope whose setting applies: the model's if it sets the field, else the fleet's."""
        if model and field in self._scopes.get(model, {}):
            return model
        return ""


async def start_span(
    traces: TraceSettings | None, model: str, version: int, arm: str, inputs: list[Tensor]
) -> Any:
    """The gateway's span of a request the settings select (``tracing.NULL_SPAN`` otherwise, at
    the cost of one attribute check while this process does not trace)."""
    if not tracing.ENABLED or (traces is not None and not await traces.sample(model)):
        return tracing.NULL_SPAN
    attributes: dict[str, Any] = {"model": model, "version": version, "arm": arm}
    if traces is not None:
        attributes.update(traces.tensor_attributes(model, inputs))
    return tracing.start("conch.gateway.infer", None, attributes)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

"""Triton's logging extension across the fleet: one set of log settings in Redis that every
service (gateway processes, schedulers, workers, and through them their Python model processes)
applies at start and whenever it changes (a pub/sub notification, no polling).

Triton's settings map onto Python's log levels: ``log_verbose_level`` > 0 shows debug lines;
otherwise the lowest of info, warning, error that is on sets the level (all off: nothing but
critical lines). ``log_format`` is kept and reported (``default`` or ``ISO8601``); Conch's lines
are JSON with ISO 8601 times either way. ``log_file`` cannot be set over the network (Triton's
rule): services log to stderr.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
import redis.asyncio as aioredis

from shared.runtime import redis_conn, subscription
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode, invalid

log = logging.getLogger(__name__)

FORMATS = ("default", "ISO8601")
NO_LOG_FILE = "log file location can not be updated through network protocol"


class LogSettings(msgspec.Struct, kw_only=True):
    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"


_decode = msgspec.json.Decoder(LogSettings).decode


def from_level(level: int) -> LogSettings:
    """The settings a process's current level amounts to (before any were set)."""
    return LogSettings(
        log_info=level <= logging.INFO,
        log_warning=level <= logging.WARNING,
        log_error=level <= logging.ERROR,
        log_verbose_level=1 if level <= logging.DEBUG else 0,
    )


def level_of(settings: LogSettings) -> int:
    if settings.log_verbose_level > 0:
        return logging.DEBUG
    for on, level in (
        (settings.log_info, logging.INFO),
        (settings.log_warning, logging.WARNING),
        (settings.log_error, logging.ERROR),
    ):
        if on:
            return level
    return logging.CRITICAL


def updated(current: LogSettings, request: dict[str, Any]) -> LogSettings:
    """The settings after a request (Triton's rules; a null value leaves a setting as it is)."""
    values = msgspec.structs.asdict(current)
    for name, value in request.items():
        if value is None:
            continue
        if name == "log_file":
            raise ConchError(ErrorCode.UNSUPPORTED, NO_LOG_FILE)
        if name in ("log_info", "log_warning", "log_error"):
            if not isinstance(value, bool):
                raise invalid(f"Unable to parse '{name}': expected a boolean, got {value!r}")
        elif name == "log_verbose_level":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
                raise invalid(f"Unable to parse '{name}': expected an integer >= 0, got {value!r}")
        elif name == "log_format":
            if value not in FORMATS:
                raise invalid(f"invalid argument for --log_format, got: {value}")
        else:
            raise invalid(
                f"unknown log setting '{name}'; expected log_info, log_warning, log_error, "
                "log_verbose_level, log_format"
            )
        values[name] = value
    return LogSettings(**values)


async def read(r: aioredis.Redis) -> LogSettings | None:
    raw = await r.get(keys.log_settings())
    return _decode(raw) if raw else None


async def write(r: aioredis.Redis, settings: LogSettings) -> None:
    """Store the fleet's settings, then tell every service (a PUBLISH names a channel, not a
    key: on Redis Cluster it cannot join a MULTI, and a listener re-reads the key anyway)."""
    await r.set(keys.log_settings(), msgspec.json.encode(settings))
    await r.publish(keys.log_settings_channel(), b"1")


def apply(settings: LogSettings) -> None:
    level = level_of(settings)
    if logging.getLogger().level != level:
        logging.getLogger().setLevel(level)
        log.warning("log level changed", extra={"level": logging.getLevelName(level)})


async def follow(redis_url: str) -> None:
    """Apply the fleet's settings now and on every change, until cancelled."""
    while True:
        client: aioredis.Redis = redis_conn.dedicated(redis_url, name="conch-log-settings")
        try:
            pubsub = await redis_conn.pubsub(client)
            await pubsub.subscribe(keys.log_settings_channel())
            found = await read(client)
            if found is not None:
                apply(found)
            async for _message in subscription.published(pubsub):
                found = await read(client)
                if found is not None:
                    apply(found)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("log settings follower reconnecting", extra={"error": str(exc)})
            await asyncio.sleep(1.0)
        finally:
            await client.aclose()

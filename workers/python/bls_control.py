"""``pb_utils.load_model`` / ``unload_model`` in a Python model process: the fleet's model control.

A model's load or unload is what the repository API's would be (``shared.fleet.control``): one
control message that every worker acts on, the desired state kept for workers started later, and
the call returns once every live worker answered (or raises ``TritonModelException`` with their
errors). As in Triton, only in explicit model control mode, and in Conch's on_demand mode, whose
repository API works as explicit mode's (``CONCH_WORKER_MODEL_CONTROL_MODE``, which the model
process inherits from its worker); other modes refuse with Triton's words.

A model may not unload itself: its own worker would wait for the ``execute`` that is waiting for
that worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import redis.asyncio as aioredis

from shared.fleet import control, heartbeats
from shared.model_config.json_form import decode_override
from shared.storage import model_files
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode, invalid, unavailable

# How long a load or unload may take across the fleet (initialize may load large weights).
TIMEOUT_S = 300.0


def check_mode(mode: str, action: str, model: str) -> None:
    if mode not in control.API_MODES:
        raise unavailable(
            f"pb_utils.{action}_model('{model}'): {control.NOT_EXPLICIT} (the model control mode "
            f"is '{mode}'; pb_utils model control needs 'explicit' or 'on_demand')"
        )


def load_request(
    model: str, config: str | bytes | dict[str, Any] | None, files: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    """The override (Triton's JSON form) and the model files ``file:<path>`` -> bytes."""
    override: dict[str, Any] | None = None
    if config:
        override = {"name": model, **decode_override(model, config)}
        if override["name"] != model:
            raise invalid(
                f"failed to load '{model}': Invalid config override: field 'name' is "
                f"'{override['name']}' but the model is '{model}'"
            )
    written: dict[str, bytes] = {}
    for name, data in (files or {}).items():
        if not name.startswith(model_files.PREFIX):
            raise invalid(
                f"failed to load '{model}': file '{name}' must be named 'file:<version>/<name>'"
            )
        if not isinstance(data, bytes | bytearray):
            raise invalid(f"File parameter '{name}' must have bytes type for its value")
        written[model_files.normalized(model, name)] = bytes(data)
    if written and override is None:
        raise invalid(
            f"failed to load '{model}': model files need a config override (Triton's rule: "
            "pass config= with files=)"
        )
    return override, written


async def load(
    r: aioredis.Redis,
    model: str,
    config: dict[str, Any] | None,
    files: dict[str, bytes],
) -> None:
    async with r.pipeline(transaction=True) as pipe:
        pipe.delete(keys.control_files(model))
        if files:
            pipe.hset(keys.control_files(model), mapping=cast(Mapping[Any, bytes], files))
        await pipe.execute()
    message = control.new_message(control.LOAD, model, config=config, files=bool(files))
    acks = await _send(r, message)
    if not any(a.status == control.ACK_OK for a in acks):
        reasons = sorted({a.message for a in acks if a.message})
        raise invalid(
            f"failed to load '{model}': no worker serves it"
            + (f" ({'; '.join(reasons)})" if reasons else "")
        )


async def unload(r: aioredis.Redis, model: str, caller: str) -> None:
    if model == caller:
        raise invalid(
            f"pb_utils.unload_model('{model}'): a model cannot unload itself (its worker waits "
            "for the execute that asks)"
        )
    await _send(r, control.new_message(control.UNLOAD, model))


async def _send(r: aioredis.Redis, message: control.ControlMessage) -> list[control.ControlAck]:
    workers = await heartbeats.live_ids(r, "worker")
    if not workers:
        raise unavailable(f"no live worker to {message.action} model '{message.model}'")
    await control.publish(r, message)
    acks, missing = await control.collect(r, message.id, workers, TIMEOUT_S)
    failed = [a for a in acks if a.status == control.ACK_ERROR]
    if failed:
        raise invalid(
            f"failed to {message.action} '{message.model}': "
            + "; ".join(f"{a.message} (worker {a.worker})" for a in failed)
        )
    if missing:
        raise ConchError(
            ErrorCode.DEADLINE_EXCEEDED,
            f"{message.action} of model '{message.model}' is still running on "
            f"{len(missing)} worker(s) after {TIMEOUT_S:g} s",
        )
    return acks

"""A worker's side of fleet-wide model control: load and unload versions while serving.

The worker reads every message of the control stream (``shared.fleet.control``) published after it
started, acts on the models it serves (``workers.loading.control_actions``), and answers each
message. Its cursor is taken at start-up before the fleet's desired state is read
(``workers.loading.fleet_state``), so a message published in between is read, not missed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import redis.asyncio as aioredis

from shared.fleet import control, streams
from shared.fleet.control import ControlAck, ControlMessage
from shared.runtime import redis_conn
from shared.runtime.wakeable_read import READ_BLOCK_MS
from shared.storage.repository import ScanResult
from shared.wire import keys
from workers.loading import control_actions, on_demand_load
from workers.loading.control_actions import ModelHost, ack
from workers.loading.fleet_state import apply_fleet_state
from workers.loading.resident import Residents
from workers.loading.start_set import ALL

log = logging.getLogger(__name__)


class ModelControl:
    def __init__(self, host: ModelHost, residents: Residents | None = None):
        self._host = host
        # On_demand mode: what this worker holds, for the placer's loads and unloads.
        self.residents = residents or Residents()
        self._cursor: bytes = b"$"

    async def startup_scan(
        self,
        scan: ScanResult,
        root: Path | None = None,
        mode: str = control.MODE_EXPLICIT,
        load_models: Sequence[str] = (ALL,),
        config_name: str = "",
    ) -> ScanResult:
        """Apply the fleet's desired state to what the disk says (explicit mode: and the start
        set), and publish the index."""
        self._cursor = await control.last_id(self._host.redis)
        return await apply_fleet_state(self._host.redis, scan, root, mode, load_models, config_name)

    async def run(self) -> None:
        client: aioredis.Redis = redis_conn.dedicated(
            self._host.settings.redis_url, name="conch-worker-control", block_ms=READ_BLOCK_MS
        )
        stream = keys.control_stream()
        try:
            while True:
                try:
                    reply = await client.xread(
                        {stream: self._cursor}, count=16, block=READ_BLOCK_MS
                    )
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("control stream read failed; retrying")
                    await asyncio.sleep(0.5)
                    continue
                for entry in streams.parse_read(reply):
                    self._cursor = entry.entry_id
                    await self._handle_entry(entry)
        finally:
            await client.aclose()

    async def _handle_entry(self, entry: streams.Entry) -> None:
        try:
            message = control.decode_message(entry.fields[keys.FIELD_DATA])
        except Exception:
            log.exception("undecodable control message skipped")
            return
        started = time.monotonic()
        try:
            answer = await self.handle(message)
        except Exception as exc:
            log.exception("control message failed", extra={"model": message.model})
            answer = ack(self._host, control.ACK_ERROR, f"{type(exc).__name__}: {exc}")
        if answer is None:  # meant for another worker: not answered, not waited for
            return
        log.info(
            "control message handled",
            extra={
                "action": message.action,
                "model": message.model,
                "status": answer.status,
                "detail": answer.message,
                "loaded": answer.loaded,
                "unloaded": answer.unloaded,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        try:
            await control.answer(self._host.redis, message.id, answer)
        except Exception:
            log.exception("could not answer a control message", extra={"model": message.model})

    async def handle(self, message: ControlMessage) -> ControlAck | None:
        """The answer to a message; None for one meant for another worker."""
        host = self._host
        if message.target and message.target != host.id:
            return None
        wanted = host.settings.models
        if wanted and message.model not in wanted:
            return ack(host, control.ACK_SKIPPED, "not among this worker's models")
        mode = host.settings.model_control_mode
        if mode not in control.API_MODES:  # a gateway's mode differs
            return ack(host, control.ACK_ERROR, control.NOT_EXPLICIT)
        if mode == control.MODE_ON_DEMAND:
            return await on_demand_load.handle(host, self.residents, message)
        if message.action == control.LOAD:
            return await control_actions.load(host, message)
        if message.action == control.UNLOAD:
            return await control_actions.unload(host, message)
        return ack(host, control.ACK_ERROR, f"unknown control action '{message.action}'")

"""What a model version's admissions share, worked out once per configuration rather than per
request: the admission script's keys, the direct path's levels, and the queue ticket of a request
that sets neither ``priority`` nor ``timeout`` (nearly all of them).

Every request of a version used to build the same key strings (hash tag, readiness set, request
and batch streams, statistics), decide the direct path from the config, and walk the queue policy
again; at c=64 that was a few percent of a gateway's Python work. A plan belongs to one
``ModelConfig`` object: the model table replaces the object when the config changes, and the plan
with it. The result is the same as ``shared.fleet.admission_script.admission_call`` and
``shared.wire.queue_ticket.queue_ticket`` (``tests/unit/test_admission_plan.py`` holds them equal).
"""

from __future__ import annotations

from typing import Any

from shared.fleet.admission_script import AdmissionCall, admission_args, direct_keys
from shared.fleet.direct_path import direct_levels
from shared.model_config import ModelConfig
from shared.wire import keys
from shared.wire.queue_ticket import QueueTicket, queue_ticket


class AdmissionPlan:
    __slots__ = ("_after", "_streams", "_tickets", "config", "model", "ready", "version")

    def __init__(self, config: ModelConfig, version: int, direct: bool):
        self.config = config
        self.model = config.name
        self.version = version
        self.ready = keys.ready(config.name, version)
        self._streams: dict[int, str] = {}
        self._after = direct_keys(config.name, version, direct_levels(config, direct))
        self._tickets: dict[int, QueueTicket] = {}

    def ticket(self, parameters: dict[str, Any], default_priority: int) -> QueueTicket:
        """``queue_ticket(config, parameters, default_priority)``, cached when the request
        sets neither its priority nor its timeout."""
        if "priority" in parameters or "timeout" in parameters:
            return queue_ticket(self.config, parameters, default_priority)
        found = self._tickets.get(default_priority)
        if found is None:
            found = queue_ticket(self.config, parameters, default_priority)
            if len(self._tickets) < 64:  # tenants' priorities: a handful
                self._tickets[default_priority] = found
        return found

    def call(
        self,
        *,
        priority: int,
        request_id: str,
        now_ms: int,
        deadline_ms: int,
        gone_ms: int,
        max_queue_size: int,
        header: bytes,
        data: bytes,
    ) -> AdmissionCall:
        """``admission_call`` for this version, from the keys worked out once."""
        stream = self._streams.get(priority)
        if stream is None:
            stream = self._streams[priority] = keys.request_stream(
                self.model, self.version, priority
            )
        return AdmissionCall(
            keys=[self.ready, stream, keys.admitted(self.model, request_id), *self._after],
            args=admission_args(now_ms, deadline_ms, gone_ms, max_queue_size, header, data),
        )


class AdmissionPlans:
    """One plan per (model, version), replaced when the model's config object changes."""

    def __init__(self, direct: bool):
        self._direct = direct
        self._plans: dict[tuple[str, int], AdmissionPlan] = {}

    def of(self, config: ModelConfig, version: int) -> AdmissionPlan:
        key = (config.name, version)
        plan = self._plans.get(key)
        if plan is None or plan.config is not config:
            plan = self._plans[key] = AdmissionPlan(config, version, self._direct)
        return plan

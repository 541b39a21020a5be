"""A version's admission plan (``gateway.core.admission_plan``) gives exactly what the per-request
builders give: ``admission_call``'s keys and arguments, ``queue_ticket``'s ticket."""

from __future__ import annotations

import pytest

from gateway.core.admission_plan import AdmissionPlans
from shared.fleet.admission_script import admission_call
from shared.fleet.direct_path import direct_levels
from shared.model_config import parse_pbtxt
from shared.wire.errors import ConchError
from shared.wire.queue_ticket import queue_ticket


def _config(batching: str):  # type: ignore[no-untyped-def]
    return parse_pbtxt(
        f"""
        name: "plan_m"
        platform: "onnxruntime_onnx"
        max_batch_size: 8
        input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        {batching}
        """
    )


CONFIGS = {
    "direct, three levels": _config(
        "dynamic_batching { priority_levels: 3 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value { max_queue_size: 5 default_timeout_microseconds:"
        " 700 allow_timeout_override: true timeout_action: DELAY } } }"
    ),
    "queued (a delay)": _config("dynamic_batching { max_queue_delay_microseconds: 100 }"),
    "no batcher": _config(""),
}
PARAMETERS = [{}, {"priority": 1}, {"priority": 3, "timeout": 500}, {"timeout": 100}, {"x": 1}]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("direct", [True, False])
def test_a_plans_calls_and_tickets_are_the_builders(name: str, direct: bool) -> None:
    config = CONFIGS[name]
    plans = AdmissionPlans(direct)
    for version in (1, 7):
        for parameters in PARAMETERS:
            for tenant_priority in (0, 1, 2):
                plan = plans.of(config, version)
                ticket = plan.ticket(parameters, tenant_priority)
                assert ticket == queue_ticket(config, parameters, tenant_priority)
                request = {
                    "request_id": f"r{version}{tenant_priority}",
                    "now_ms": 1_000,
                    "deadline_ms": 31_000,
                    "gone_ms": 30_000,
                    "max_queue_size": ticket.max_queue_size,
                    "header": b"h",
                    "data": b"d",
                }
                expected = admission_call(
                    model=config.name,
                    version=version,
                    priority=ticket.priority,
                    direct_levels=direct_levels(config, direct),
                    **request,
                )
                assert plan.call(priority=ticket.priority, **request) == expected


def test_a_new_config_object_gets_a_new_plan_and_bad_parameters_still_refused() -> None:
    plans = AdmissionPlans(True)
    direct = CONFIGS["direct, three levels"]
    plan = plans.of(direct, 1)
    assert plans.of(direct, 1) is plan
    queued = CONFIGS["queued (a delay)"]  # same model name, its config changed
    changed = plans.of(queued, 1)
    assert changed is not plan
    assert changed.call(priority=1, request_id="r", now_ms=0, deadline_ms=1, gone_ms=0,
                        max_queue_size=0, header=b"", data=b"").keys == [
        k for k in admission_call(model="plan_m", version=1, priority=1, request_id="r",
                                  now_ms=0, deadline_ms=1, gone_ms=0, max_queue_size=0,
                                  header=b"", data=b"").keys
    ]  # fmt: skip
    with pytest.raises(ConchError, match="priority"):
        plan.ticket({"priority": -1}, 0)

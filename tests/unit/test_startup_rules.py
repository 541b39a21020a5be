"""The pure rules of start-up: gateway processes for the CPUs, Triton's instance placement,
worker processes per GPU, what the mesh waits for, back-off, first error lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch import supervisor
from conch.service_output import FirstError
from conch.worker_plan import plan_workers, visible_gpus
from gateway.runtime import supervisor as process_supervisor
from shared.fleet.control import DesiredState, IndexEntry
from shared.fleet.expected_models import Expectations, LoadError, expected, not_ready
from shared.model_config import InstanceGroup, ModelConfig, VersionPolicy
from shared.runtime import cpu_budget
from shared.wire.errors import ConchError
from workers.loading.placement import Devices, placements


def _config(*groups: InstanceGroup, name: str = "m") -> ModelConfig:
    return ModelConfig(
        name=name,
        platform="pytorch_libtorch",
        backend="pytorch",
        max_batch_size=0,
        inputs=[],
        outputs=[],
        version_policy=VersionPolicy(),
        instance_groups=list(groups),
        dynamic_batching=None,
        parameters={},
        default_model_filename="model.pt",
    )


@pytest.mark.parametrize(
    ("cpus", "gateways"), [(1, 2), (2, 2), (3, 2), (4, 2), (8, 4), (16, 8), (64, 8)]
)
def test_auto_gateways_follow_the_cpus(cpus: int, gateways: int) -> None:
    assert cpu_budget.auto_gateways(cpus) == gateways


def test_gateway_processes_setting() -> None:
    assert cpu_budget.gateway_processes("3") == 3
    assert cpu_budget.gateway_processes("auto") == cpu_budget.auto_gateways(
        cpu_budget.available_cpus()
    )
    for bad in ("0", "-1", "many"):
        with pytest.raises(ConchError, match="'auto' or a positive number"):
            cpu_budget.gateway_processes(bad)


def test_cgroup_quota_caps_the_cpus(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpu_budget.cgroup_quota(tmp_path) == 1.5
    assert cpu_budget.available_cpus(tmp_path) <= 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_budget.cgroup_quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("400000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cpu_budget.cgroup_quota(v1) == 4.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cpu_budget.cgroup_quota(v1) is None


def test_kind_gpu_places_count_instances_on_each_gpu_as_triton_does() -> None:
    group = InstanceGroup(name="g", kind="KIND_GPU", count=2)
    found = placements(_config(group), Devices(), visible=2)
    assert [(p.device, p.device_id, p.index) for p in found] == [
        ("gpu", 0, 0), ("gpu", 0, 1), ("gpu", 1, 2), ("gpu", 1, 3),
    ]  # fmt: skip
    listed = InstanceGroup(name="g", kind="KIND_GPU", count=1, gpus=[1])
    assert [(p.device, p.device_id) for p in placements(_config(listed), Devices(), 2)] == [
        ("gpu", 1)
    ]
    with pytest.raises(ConchError, match="names GPU 3; this host has GPUs 0-1"):
        placements(
            _config(InstanceGroup(name="g", kind="KIND_GPU", count=1, gpus=[3])), Devices(), 2
        )
    with pytest.raises(ConchError, match="KIND_GPU, which needs a GPU"):
        placements(_config(group), Devices(), visible=0)


def test_kind_auto_and_cpu_groups() -> None:
    auto = InstanceGroup(name="a", kind="KIND_AUTO", count=1)
    assert [p.device for p in placements(_config(auto), Devices(), visible=0)] == ["cpu"]
    assert [p.device for p in placements(_config(auto), Devices(), visible=2)] == ["gpu", "gpu"]
    cpu = InstanceGroup(name="c", kind="KIND_CPU", count=3)
    assert [p.index for p in placements(_config(cpu), Devices(), visible=4)] == [0, 1, 2]


def test_a_worker_pinned_to_one_gpu_places_only_its_share() -> None:
    """conch up's per-GPU workers: CUDA_VISIBLE_DEVICES=<gpu> (one visible, local index 0)."""
    gpu_group = InstanceGroup(name="g", kind="KIND_GPU", count=2)
    only_1 = InstanceGroup(name="h", kind="KIND_GPU", count=1, gpus=[1])
    cpu = InstanceGroup(name="c", kind="KIND_CPU", count=1)
    second = Devices(gpu_ids=(1,), cpu_instances=False)
    found = placements(_config(gpu_group, only_1, cpu), second, visible=1)
    assert [(p.group.name, p.device, p.device_id) for p in found] == [
        ("g", "gpu", 0), ("g", "gpu", 0), ("h", "gpu", 0),
    ]  # fmt: skip
    first = Devices(gpu_ids=(0,), cpu_instances=True)
    found = placements(_config(gpu_group, only_1, cpu), first, visible=1)
    assert [(p.group.name, p.device) for p in found] == [("g", "gpu"), ("g", "gpu"), ("c", "cpu")]


def test_workers_per_gpu_for_backends_with_gpu_models() -> None:
    gpu_model = _config(InstanceGroup(name="g", kind="KIND_GPU", count=1))
    cpu_model = _config(InstanceGroup(name="c", kind="KIND_CPU", count=1))
    plans = plan_workers({"pytorch": [gpu_model], "python": [cpu_model]}, "auto", ["0", "1"])
    assert [(p.name, p.env.get("CUDA_VISIBLE_DEVICES")) for p in plans] == [
        ("worker-python-0", None), ("worker-pytorch-gpu0", "0"), ("worker-pytorch-gpu1", "1"),
    ]  # fmt: skip
    assert plans[1].env["CONCH_WORKER_CPU_INSTANCES"] == "true"
    assert plans[2].env["CONCH_WORKER_CPU_INSTANCES"] == "false"
    assert [p.name for p in plan_workers({"pytorch": [gpu_model]}, "auto", [])] == [
        "worker-pytorch-0"
    ]
    assert [p.name for p in plan_workers({"pytorch": [gpu_model]}, "2", ["0"])] == [
        "worker-pytorch-0", "worker-pytorch-1",
    ]  # fmt: skip
    with pytest.raises(ConchError, match="'auto' or a positive number"):
        plan_workers({"pytorch": [gpu_model]}, "0", [])
    assert visible_gpus(2, {"CUDA_VISIBLE_DEVICES": "3,5"}) == ["3", "5"]
    assert visible_gpus(2, {}) == ["0", "1"]


def test_expected_models_are_on_disk_servable_not_unloaded_not_failed() -> None:
    found = Expectations(
        scanned=True,
        index={
            "a": IndexEntry(versions=[1]),
            "bad_config": IndexEntry(error="config.pbtxt: parse error"),
            "ensemble": IndexEntry(versions=[1], error="no Conch worker serves backend 'ensemble'"),
            "unloaded": IndexEntry(versions=[1]),
            "versions_gone": IndexEntry(versions=[1, 2]),
            "some_gone": IndexEntry(versions=[1, 2]),
            "failed": IndexEntry(versions=[1]),
        },
        states={
            "unloaded": DesiredState(unloaded=True),
            "versions_gone": DesiredState(excluded=[1, 2]),
            "some_gone": DesiredState(excluded=[2]),
        },
        load_errors={"failed": LoadError(worker="w", message="ImportError: x")},
    )
    assert expected(found) == {"a", "some_gone"}
    assert not_ready({"a", "some_gone"}, {"some_gone", "other"}) == ["a"]


def test_backoff_doubles_to_ten_seconds() -> None:
    for backoff in (supervisor.backoff_s, process_supervisor.backoff_s):
        assert [backoff(n) for n in range(7)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize(
    ("lines", "first"),
    [
        (
            ["starting\n", "Traceback (most recent call last):\n", '  File "x.py", line 1\n',
             "    import litestar\n", "ImportError: No module named 'litestar'\n", "later\n"],
            "ImportError: No module named 'litestar'",
        ),
        (
            ['{"level":"info","msg":"loading"}\n',
             '{"level":"error","msg":"model load failed","error":"no GPU"}\n'],
            "model load failed: no GPU",
        ),
        (
            ['{"level":"error","msg":"Traceback (most recent call last):\\n  x\\nKeyError: 1"}\n'],
            "KeyError: 1",
        ),
        (
            ['{"level":"error","msg":"boom","exc":"Traceback...\\nValueError: bad"}\n'],
            "boom: ValueError: bad",
        ),
        (["conch worker: no torch\n"], "conch worker: no torch"),
        (["2026-01-01 00:00:00,000 worker ERROR workers.loading.startup: model load failed\n"],
         "2026-01-01 00:00:00,000 worker ERROR workers.loading.startup: model load failed"),
        (['{"level":"warning","msg":"slow"}\n', "all good\n"], None),
    ],
)  # fmt: skip
def test_first_error_line(lines: list[str], first: str | None) -> None:
    found = FirstError()
    for line in lines:
        found.feed(line)
    assert found.line == first

"""Which worker processes ``conch up`` starts for each backend of the repository.

``--workers-per-backend auto`` (the default): a backend with a model that runs on a GPU
(``KIND_GPU``, or ``KIND_AUTO`` on a host with GPUs) gets one worker process per visible GPU,
pinned to it (``CUDA_VISIBLE_DEVICES``) and told which GPU it drives (``CONCH_WORKER_GPU_IDS``),
so no single process's GIL drives every GPU; each places ``count`` instances of each group on its
GPU, as Triton places ``count`` per GPU (``workers.loading.placement``). The CPU instance groups of
such a backend run in its first worker only. Any other backend gets one worker. A number gives that
many unpinned workers per backend, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from shared.model_config import ModelConfig
from shared.wire.errors import invalid

GPU_KINDS = ("KIND_GPU", "KIND_AUTO")


@dataclass(frozen=True)
class WorkerPlan:
    name: str
    backend: str
    env: dict[str, str] = field(default_factory=dict)


def uses_gpu(configs: list[ModelConfig]) -> bool:
    return any(g.kind in GPU_KINDS for c in configs for g in c.instance_groups)


def visible_gpus(count: int, environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs ``conch up`` may give out, as CUDA_VISIBLE_DEVICES names them (or 0..n-1)."""
    env = os.environ if environ is None else environ
    named = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return named[:count] if named else [str(i) for i in range(count)]


def plan_workers(
    by_backend: dict[str, list[ModelConfig]], setting: str, gpus: list[str]
) -> list[WorkerPlan]:
    """The worker processes for each backend (pure): ``setting`` is "auto" or a number."""
    text = str(setting).strip().lower()
    plans: list[WorkerPlan] = []
    if text != "auto":
        count = int(text) if text.isdigit() else 0
        if count < 1:
            raise invalid(
                f"--workers-per-backend must be 'auto' or a positive number, not {setting!r}"
            )
        for backend in sorted(by_backend):
            plans += [WorkerPlan(f"worker-{backend}-{i}", backend) for i in range(count)]
        return plans
    for backend in sorted(by_backend):
        if not gpus or not uses_gpu(by_backend[backend]):
            plans.append(WorkerPlan(f"worker-{backend}-0", backend))
            continue
        for index, device in enumerate(gpus):
            env = {
                "CUDA_VISIBLE_DEVICES": device,
                "CONCH_WORKER_GPU_IDS": str(index),
                "CONCH_WORKER_CPU_INSTANCES": "true" if index == 0 else "false",
            }
            plans.append(WorkerPlan(f"worker-{backend}-gpu{index}", backend, env))
    return plans

"""Where a model's instances run on this worker: Triton's instance groups on its devices.

Triton's rule: a ``KIND_GPU`` group puts ``count`` instances on each GPU it lists in ``gpus``, or
on each visible GPU when it lists none; ``KIND_AUTO`` is ``KIND_GPU`` where a GPU is visible and
``KIND_CPU`` otherwise; ``KIND_CPU`` puts ``count`` instances on the CPU. ``KIND_MODEL`` makes
``count`` instances with no device assigned (device ``"model"``): the model places itself, which
the Python backend honours (``args['model_instance_kind']`` is ``"MODEL"``); for the other
backends the load is refused, naming the field. They are placed with the CPU groups.

With the rate limiter on (``CONCH_WORKER_RATE_LIMIT``), an instance that asks for more copies of
a resource than ``--rate-limit-resource`` makes available fails the load, as in Triton.

A worker may drive only some of the host's GPUs (``conch up`` starts one worker per GPU, pinned
with ``CUDA_VISIBLE_DEVICES`` and ``CONCH_WORKER_GPU_IDS``): it places the GPU instances of the
GPUs it drives and leaves the others to their workers; CPU groups are placed by one of them only
(``CONCH_WORKER_CPU_INSTANCES``). A model with no instance on this worker is not loaded here.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.model_config import InstanceGroup, ModelConfig
from shared.model_config.rate_limiter import rate_limiter
from shared.runtime import gpu
from shared.wire.errors import ConchError, ErrorCode, invalid
from workers.backend_table import BACKENDS
from workers.ratelimit.resources import EXECUTION_COUNT, Available, check_needs, parse_available
from workers.settings import WorkerSettings

# Backends whose models place themselves (Triton's KIND_MODEL).
PLACES_ITSELF = frozenset({"python"})


def places_itself(config: ModelConfig) -> bool:
    """The python backend's models, and those of the Python-based backends it serves (a
    backend that is not built in: vLLM's configurations ask for KIND_MODEL)."""
    return config.backend in PLACES_ITSELF or config.backend not in BACKENDS


@dataclass(frozen=True)
class Devices:
    """The devices this worker drives."""

    # Physical ids of the GPUs this worker drives, in the order CUDA numbers them here; empty:
    # every visible GPU, numbered as CUDA numbers them.
    gpu_ids: tuple[int, ...] = ()
    # Whether this worker places the CPU instance groups.
    cpu_instances: bool = True
    # With the rate limiter on: the copies of resources made available (--rate-limit-resource).
    rate_limit: bool = False
    available: tuple[Available, ...] = ()

    def visible(self) -> int:
        return gpu.gpu_count()

    @classmethod
    def of(cls, settings: WorkerSettings) -> Devices:
        return cls(
            tuple(settings.gpu_ids),
            settings.cpu_instances,
            settings.rate_limit == EXECUTION_COUNT,
            parse_available(settings.rate_limit_resources),
        )


@dataclass(frozen=True)
class Placement:
    group: InstanceGroup
    index: int  # the instance's number within its group
    device: str  # "cpu" | "gpu" | "model" (KIND_MODEL: the model places itself)
    device_id: int  # the CUDA device index in this process (0 on the CPU)
    gpu: int | None = None  # the physical GPU id (None off the GPUs)


def placements(config: ModelConfig, devices: Devices, visible: int) -> list[Placement]:
    """Every instance of ``config`` this worker runs, given ``visible`` GPUs here (pure)."""
    found = _placements(config, devices, visible)
    if devices.rate_limit and config.sequence_batching is not None:
        limited = [g.name for g in config.instance_groups if rate_limiter(config, g.name).resources]
        if limited:
            raise invalid(
                f"model '{config.name}': field 'instance_group.rate_limiter' of group "
                f"'{limited[0]}' is not honoured for sequence models here (their instances run "
                "the sequence batcher's slots, which take no rate-limiter resources); remove "
                "it, or run with --rate-limit=off"
            )
    if devices.rate_limit:
        for placement in found:
            check_needs(config, placement.group.name, placement.gpu, devices.available)
    return found


def _placements(config: ModelConfig, devices: Devices, visible: int) -> list[Placement]:
    physical = list(devices.gpu_ids) or list(range(visible))
    found: list[Placement] = []
    for group in config.instance_groups:
        kind = group.kind
        if kind == "KIND_AUTO":
            kind = "KIND_GPU" if visible > 0 else "KIND_CPU"
        if kind == "KIND_MODEL" and not places_itself(config):
            raise invalid(
                f"model '{config.name}': field 'instance_group.kind' of group '{group.name}' is "
                f"KIND_MODEL, which the {config.backend or config.platform} backend cannot "
                "honour (the model would have to place itself); expected KIND_CPU, KIND_GPU or "
                f"KIND_AUTO (KIND_MODEL: backend {', '.join(sorted(PLACES_ITSELF))})"
            )
        if kind != "KIND_GPU":
            device = "model" if kind == "KIND_MODEL" else "cpu"
            if devices.cpu_instances:
                found += [Placement(group, i, device, 0) for i in range(group.count)]
            continue
        if visible == 0:
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"instance group '{group.name}' of model '{config.name}' is KIND_GPU, "
                "which needs a GPU; none is visible",
            )
        index = 0
        for gpu_id in group.gpus or physical:
            if gpu_id not in physical:
                if devices.gpu_ids:
                    continue  # another worker's GPU
                raise invalid(
                    f"instance group '{group.name}' of model '{config.name}' names GPU "
                    f"{gpu_id}; this host has GPUs 0-{visible - 1}"
                )
            for _ in range(group.count):
                found.append(Placement(group, index, "gpu", physical.index(gpu_id), gpu_id))
                index += 1
    return found


def runs_here(config: ModelConfig, devices: Devices) -> bool:
    """Whether this worker runs any instance of ``config`` (a placement error: it would try)."""
    try:
        return bool(placements(config, devices, devices.visible()))
    except ConchError:
        return True

"""The rate limiter's pure parts: the available counts (Triton's ``--rate-limit-resource``), the
scope a resource is counted in, and what one instance needs.

Triton counts a resource per device unless the model marks it ``global``; the fleet has many
hosts, so a device here is one host's GPU (``<host>/gpu<physical id>``) or its CPU
(``<host>/cpu``, where KIND_CPU and KIND_MODEL instances count), and a global resource has one
set of copies for the whole fleet. ``<name>:<count>`` sets the copies of every device (and of a
global resource), ``<name>:<count>:<device>`` those of one GPU; a resource no setting names has,
as in Triton, as many copies as the largest count any instance asks for (kept by the script).
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.model_config.rate_limiter import rate_limiter
from shared.model_config.structs import ModelConfig
from shared.wire import keys
from shared.wire.errors import invalid

OFF = "off"
EXECUTION_COUNT = "execution_count"
MODES = (OFF, EXECUTION_COUNT)
GLOBAL_SCOPE = "global"


@dataclass(frozen=True)
class Available:
    """One ``--rate-limit-resource``: ``device`` None applies to every device."""

    name: str
    count: int
    device: int | None = None


def parse_available(
    values: list[str], setting: str = "CONCH_WORKER_RATE_LIMIT_RESOURCES"
) -> tuple[Available, ...]:
    found: list[Available] = []
    for value in values:
        parts = value.strip().split(":")
        try:
            if len(parts) not in (2, 3) or not parts[0]:
                raise ValueError
            count = int(parts[1])
            device = int(parts[2]) if len(parts) == 3 else None
            if count < 0 or (device is not None and device < 0):
                raise ValueError
        except ValueError:
            raise invalid(
                f"{setting} has '{value}'; expected <name>:<count>[:<device>] with a count and "
                "a GPU id of 0 or more"
            ) from None
        found.append(Available(parts[0], count, device))
    return tuple(found)


def available_count(
    available: tuple[Available, ...], name: str, device: int | None, global_: bool
) -> int:
    """The copies set for a resource on a device (a GPU id; None for the CPU); 0: not set (the
    default applies). A device's own setting wins over the one for every device."""
    general = 0
    for entry in available:
        if entry.name != name:
            continue
        if entry.device is None:
            general = entry.count
        elif not global_ and device is not None and entry.device == device:
            return entry.count
    return general


def scope(global_: bool, host: str, gpu: int | None) -> str:
    if global_:
        return GLOBAL_SCOPE
    return f"{host}/cpu" if gpu is None else f"{host}/gpu{gpu}"


@dataclass(frozen=True)
class Needs:
    """What one instance holds while it executes: the keys, per key (count, copies set or 0),
    and its stride (Triton's priority, 0 counted as 1)."""

    keys: tuple[str, ...]
    counts: tuple[tuple[int, int], ...]
    stride: int


def instance_needs(
    config: ModelConfig,
    group_name: str,
    gpu: int | None,
    host: str,
    available: tuple[Available, ...],
) -> Needs | None:
    """None when the group asks for no resources (the instance runs unlimited, as in Triton)."""
    limiter = rate_limiter(config, group_name)
    resources = [r for r in limiter.resources if r.count > 0]
    if not resources:
        return None
    return Needs(
        tuple(keys.rate_resource(r.name, scope(r.global_, host, gpu)) for r in resources),
        tuple((r.count, available_count(available, r.name, gpu, r.global_)) for r in resources),
        max(limiter.priority, 1),
    )


def check_needs(
    config: ModelConfig, group_name: str, gpu: int | None, available: tuple[Available, ...]
) -> None:
    """Triton refuses a model whose instance needs more copies than were made available: it
    could never run."""
    for resource in rate_limiter(config, group_name).resources:
        have = available_count(available, resource.name, gpu, resource.global_)
        if have and resource.count > have:
            where = "global" if resource.global_ else ("CPU" if gpu is None else f"GPU {gpu}")
            raise invalid(
                f"model '{config.name}': field 'instance_group.rate_limiter.resources' of group "
                f"'{group_name}' asks for {resource.count} of '{resource.name}'; "
                f"--rate-limit-resource makes {have} available ({where}); expected at most that"
            )

"""Triton's ``rate_limiter`` of an instance group, typed, and the load-time rules of the fields
that decide where and how an instance runs (``rate_limiter``, ``is_shape_tensor``).

``rate_limiter { resources [{ name, count, global }] priority }`` (Triton's
``model_config.proto``): the resources an instance must hold while it executes, and its
priority among instances waiting for them. Workers count them fleet-wide
(``workers.ratelimit``) when ``CONCH_WORKER_RATE_LIMIT`` is ``execution_count``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.model_config.structs import ModelConfig
from shared.wire.errors import invalid


@dataclass(frozen=True)
class Resource:
    name: str
    count: int
    global_: bool = False  # one set of copies for the whole fleet, not one per device


@dataclass(frozen=True)
class RateLimiter:
    resources: tuple[Resource, ...] = ()
    priority: int = 0  # Triton's weighting: 2 is granted half as often as 1; 0 counts as 1


def rate_limiter(config: ModelConfig, group_name: str) -> RateLimiter:
    """The instance group's rate limiter (none: no resources, priority 0)."""
    for group in config.json.get("instance_group", []):
        if group.get("name") == group_name:
            return _typed(group.get("rate_limiter") or {})
    return RateLimiter()


def _typed(raw: dict[str, Any]) -> RateLimiter:
    resources = tuple(
        Resource(str(r.get("name", "")), int(r.get("count", 0)), bool(r.get("global", False)))
        for r in raw.get("resources", [])
    )
    return RateLimiter(resources, int(raw.get("priority", 0)))


def check_rate_limiters(config: ModelConfig, source: str) -> None:
    """Names present and unique within a group (counts are unsigned in Triton's schema), and one
    resource never global in one group and per-device in another (Triton refuses both)."""
    scope: dict[str, bool] = {}
    field = "instance_group.rate_limiter.resources"
    for group in config.instance_groups:
        seen: set[str] = set()
        for resource in rate_limiter(config, group.name).resources:
            where = f"{source}: model '{config.name}': field '{field}' of group '{group.name}'"
            if not resource.name:
                raise invalid(f"{where} has a resource without a name; expected a name")
            if resource.name in seen:
                raise invalid(f"{where} names '{resource.name}' twice; expected each once")
            if scope.setdefault(resource.name, resource.global_) != resource.global_:
                raise invalid(
                    f"{where}: '{resource.name}' is global in one group and per-device in "
                    "another; expected one of the two"
                )
            seen.add(resource.name)


def check_shape_tensors(config: ModelConfig, source: str) -> None:
    """``is_shape_tensor``: TensorRT's shape tensors (values that set other tensors' shapes,
    given on the host and not batched along the first dimension). Conch's TensorRT backend
    binds every input as a device tensor batched along dimension 0, so a model that declares
    one is refused rather than run with its shape values concatenated as data."""
    for kind, specs in (("input", config.inputs), ("output", config.outputs)):
        for spec in specs:
            if spec.is_shape_tensor:
                raise invalid(
                    f"{source}: model '{config.name}': field '{kind}.is_shape_tensor' of "
                    f"'{spec.name}' is true; Conch does not pass TensorRT shape tensors "
                    "(expected false: give the engine execution tensors only)"
                )

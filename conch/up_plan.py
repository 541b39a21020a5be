"""What ``conch up`` serves: its repositories scanned, the backends whose workers start, and the
models it waits for before it says it is ready.

Every backend with a model in the repositories gets its workers, whatever the control mode (in
explicit mode the repository API may load any of them later). A model whose backend is not built
in is a Python-based backend's (``shared.model_config.python_based``): the python worker serves
it when ``--backend-directory`` has ``NAME/model.py``, else it failed to load, with Triton's
message and the places looked in. The models waited for follow
Triton's ``--model-control-mode``: every servable model in ``none`` and ``poll``; in
``explicit`` only ``--load-model`` (all for ``*``, none without one). A model among them that
cannot even be read stops ``conch up`` unless ``--exit-on-error=false``, as a load failure does.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from conch.up_args import UsageError
from shared.model_config import ModelConfig, python_based
from shared.model_config.defaults import WORKER_BACKENDS
from shared.storage.repositories import Repositories
from shared.wire.errors import ConchError

log = logging.getLogger("conch.up")


@dataclass(frozen=True)
class ModelPlan:
    by_backend: dict[str, list[ModelConfig]]
    wait_for: list[str]  # the models conch up waits for, sorted
    # Models it would wait for whose directory could not be read (a configuration that does not
    # parse, a name in two repositories): failed to load, as Triton says at start.
    failed: dict[str, str]


def plan_models(args: argparse.Namespace, cache_dir: Path | None = None) -> ModelPlan:
    """Scan the repositories (their remote ones copied first). Raises ``ConchError`` for a
    repository that cannot be read, :class:`UsageError` for a start-up line that asks for what
    is not there."""
    repositories = Repositories(args.model_repository, cache_dir, args.model_config_name)
    repositories.refresh()
    scan = repositories.scan(auto_complete=not args.strict_model_config)
    by_backend: dict[str, list[ModelConfig]] = {}
    for entry in scan.models.values():
        by_backend.setdefault(entry.config.backend, []).append(entry.config)
    by_backend.pop("ensemble", None)  # run by the schedulers, not by a worker
    errors = dict(scan.errors)
    errors.update(_python_based(by_backend, args.backend_directory))
    if not by_backend:
        where = ", ".join(args.model_repository)
        first = f" ({next(iter(errors.values()))})" if errors else ""
        raise UsageError(f"no servable model in {where}{first}")
    servable = sorted(m.name for configs in by_backend.values() for m in configs)
    if args.model_control_mode not in ("explicit", "on_demand") or args.load_model == ["*"]:
        return ModelPlan(by_backend, servable, errors)
    unknown = [n for n in args.load_model if n not in scan.models and n not in errors]
    if unknown and args.exit_on_error:
        raise UsageError(
            f"--load-model {', '.join(unknown)}: no such model in the repositories "
            f"({', '.join(args.model_repository)})"
        )
    for name in unknown:
        log.error("no such model to load", extra={"model": name})
    failed = {n: e for n, e in errors.items() if n in args.load_model}
    return ModelPlan(by_backend, [n for n in servable if n in args.load_model], failed)


def _python_based(by_backend: dict[str, list[ModelConfig]], setting: str) -> dict[str, str]:
    """Move the models of Python-based backends to the python worker; the load error of each
    model whose backend is found nowhere (it is left out)."""
    directories = python_based.parse_directories(setting)
    failed: dict[str, str] = {}
    for backend in sorted(set(by_backend) - set(WORKER_BACKENDS)):
        for config in by_backend.pop(backend):
            try:
                found = python_based.resolve(config, directories, WORKER_BACKENDS)
            except ConchError as exc:
                failed[config.name] = exc.message
                continue
            log.info("python-based backend", extra={"model": config.name, "backend": str(found)})
            by_backend.setdefault("python", []).append(config)
    return failed

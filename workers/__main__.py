"""``python -m workers --backend NAME`` / ``conch worker --backend NAME``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from shared.runtime import logs, tracing
from shared.runtime.runner import run_service
from shared.wire.errors import ConchError
from workers.settings import WorkerSettings

if TYPE_CHECKING:
    from shared.model_config import ModelConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="conch worker", description=__doc__)
    parser.add_argument(
        "--backend", help="onnxruntime | pytorch | python | tensorrt | openvino | fil | tensorflow"
    )
    parser.add_argument(
        "--model-repository",
        help="the model repositories: paths or s3:// locations, comma-separated",
    )
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--health-port", type=int)
    args = parser.parse_args(argv)
    settings = WorkerSettings.from_env(
        backend=args.backend,
        model_repository=args.model_repository,
        models=args.models.split(",") if args.models else None,
        health_port=args.health_port,
    )
    logs.setup(f"worker-{settings.backend}", settings.log_level, settings.log_format)
    from workers.gpu_metrics import register_gpu_metrics
    from workers.service import WorkerService

    register_gpu_metrics()  # nv_gpu_* on /metrics where NVML finds a GPU; nothing otherwise
    tracing.setup(f"worker-{settings.backend}")

    try:
        service = WorkerService(settings)
        service.backend.check_host()
    except ConchError as exc:
        print(f"conch worker: {exc.message}", file=sys.stderr, flush=True)
        asyncio.run(report_backend_failure(settings, exc.message))
        raise SystemExit(2) from None
    run_service(service.run())


async def report_backend_failure(settings: WorkerSettings, message: str) -> None:
    """The backend cannot run here: record it as the load error of each model it would serve,
    so the mesh does not wait for them (``shared.fleet.expected_models``); best effort."""
    from shared.fleet import expected_models
    from shared.model_config import python_based
    from shared.runtime import redis_conn
    from shared.storage.repositories import Repositories
    from workers.backend_table import BACKENDS

    try:
        repositories = Repositories.from_setting(
            settings.model_repository,
            settings.repository_cache_dir or None,
            settings.model_config_name,
        )
        repositories.refresh()
        scan = repositories.scan()
    except ConchError:
        return
    wanted = set(settings.models)

    def served(config: ModelConfig) -> bool:  # the python worker serves Python-based backends
        if config.backend == settings.backend:
            return True
        return settings.backend == "python" and python_based.is_candidate(config, BACKENDS)

    models = [
        name
        for name, model in scan.models.items()
        if served(model.config) and (not wanted or name in wanted)
    ]
    redis = redis_conn.dedicated(settings.redis_url, name="conch-worker-failed")
    worker = f"worker-{settings.backend} (pid {os.getpid()})"
    try:
        async with asyncio.timeout(5):
            for name in models:
                await expected_models.record_load_error(redis, name, worker, message)
    except Exception as error:  # Redis unreachable: the exit code still tells the supervisor
        print(f"conch worker: could not record the failure in Redis: {error}", file=sys.stderr)
    finally:
        await redis.aclose()


if __name__ == "__main__":
    main()

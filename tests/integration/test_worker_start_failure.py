"""A worker whose backend cannot run here records that as the load error of every model it
would serve, so the mesh does not wait for them (``workers.__main__.report_backend_failure``)."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from shared.fleet import expected_models
from workers.__main__ import report_backend_failure
from workers.settings import WorkerSettings

CONFIGS = {
    "by_python": 'backend: "python"',
    "by_wordcount": 'backend: "wordcount"',  # a Python-based backend: the python worker's too
    "by_onnx": 'platform: "onnxruntime_onnx"',
}


def _repository(root: Path) -> Path:
    for name, line in CONFIGS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{line}\nmax_batch_size: 0\n')
    return root


async def test_the_python_worker_reports_its_python_based_models_too(
    aredis: aioredis.Redis, redis_url: str, tmp_path: Path
) -> None:
    settings = WorkerSettings(
        backend="python", model_repository=str(_repository(tmp_path)), redis_url=redis_url
    )
    await report_backend_failure(settings, "python cannot start: boom")
    errors = (await expected_models.read(aredis)).load_errors
    assert set(errors) == {"by_python", "by_wordcount"}

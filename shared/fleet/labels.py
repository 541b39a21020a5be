"""Classification labels: the lines of an output's ``label_filename``, published to Redis.

The worker that loads a model reads its label files (they live in the model directory, which
only workers see) and publishes them; a gateway reads them when a request asks an output for
its top classes (``gateway.extensions.classification``).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import redis.asyncio as aioredis

from shared.model_config import ModelConfig
from shared.wire import keys

_decode = msgspec.json.Decoder(dict[str, list[str]]).decode


def read_label_files(model_dir: Path, config: ModelConfig) -> dict[str, list[str]]:
    """Output name -> its labels, for the outputs with a label file inside the model directory
    (a file outside it, or missing, gives no labels: classification still answers, unlabelled)."""
    root = model_dir.resolve()
    found: dict[str, list[str]] = {}
    for output in config.json.get("output", []):
        filename = output.get("label_filename")
        if not filename:
            continue
        path = (root / filename).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            continue
        found[output["name"]] = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return found


async def publish(r: aioredis.Redis, model_dir: Path, config: ModelConfig) -> None:
    """Publish (or clear) the model's labels as found in its directory."""
    found = read_label_files(model_dir, config)
    if found:
        await r.hset(keys.labels(), config.name, msgspec.json.encode(found))
    else:
        await r.hdel(keys.labels(), config.name)


async def read(r: aioredis.Redis, model: str) -> dict[str, list[str]]:
    raw = await r.hget(keys.labels(), model)
    return _decode(raw) if raw else {}

"""Triton's ``model_warmup``: sample batches an instance runs before its version is READY.

Each warmup setting becomes ``max(count, 1)`` batches of ``batch_size`` requests; every request
carries one sample (batch dimension 1 when the model batches), as Triton's core builds them, so
the first real batch does not pay for lazy initialisation (CUDA context, kernel selection, JIT).
Input data is ``zero_data``, ``random_data`` (seeded, so warmup is reproducible; small
non-negative integers, so index-like inputs stay in range; BYTES gets zero data, as in Triton) or
``input_data_file``: raw row-major bytes, or 4-byte-length-prefixed elements for TYPE_STRING,
read from ``<version>/warmup/<file>``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from shared.model_config import ModelConfig
from shared.wire import datatypes, tensors
from shared.wire.errors import ConchError, invalid
from workers.backend import ModelInstance, ModelRequest
from workers.batches import ragged

WARMUP_DIR = "warmup"
_SEED = 0


def warmup_batches(config: ModelConfig, version_path: Path) -> list[list[ModelRequest]]:
    """The batches to execute, in order, before the version is READY (empty: no warmup)."""
    batches: list[list[ModelRequest]] = []
    rng = np.random.default_rng(_SEED)
    for index, setting in enumerate(config.model_warmup):
        name = setting.get("name") or f"warmup_{index}"
        batch_size = int(setting.get("batch_size", 1) or 1)
        if config.max_batch_size == 0 and batch_size != 1:
            raise _error(config, name, f"batch_size is {batch_size}; a non-batching model needs 1")
        if config.max_batch_size and batch_size > config.max_batch_size:
            raise _error(
                config, name, f"batch_size {batch_size} > max_batch_size {config.max_batch_size}"
            )
        inputs = {
            input_name: _sample(config, name, input_name, spec, version_path, rng)
            for input_name, spec in setting.get("inputs", {}).items()
        }
        for repeat in range(max(int(setting.get("count", 0) or 0), 1)):
            batch = [
                ModelRequest(
                    id=f"warmup-{name}-{repeat}-{i}",
                    inputs=inputs,
                    requested_outputs=config.output_names,
                )
                for i in range(batch_size)
            ]
            ragged.add_batch_inputs(config, batch)  # a warmup batch is a batch like any other
            batches.append(batch)
    return batches


def run_warmup(instance: ModelInstance, config: ModelConfig, version_path: Path) -> int:
    """Execute every warmup batch on the instance; raise on the first failed request.

    Returns the number of batches run. Loading a version (``workers.loading.loader``) runs the same
    batches on each instance before the version is READY, with its own error message.
    """
    batches = warmup_batches(config, version_path)
    for batch in batches:
        execution = instance.execute(batch)
        for request, result in zip(batch, execution.results, strict=True):
            if result.error is not None:
                raise ConchError(
                    result.error.code,
                    f"model '{config.name}' warmup '{request.id}' failed: {result.error.message}",
                )
    return len(batches)


def _sample(
    config: ModelConfig,
    setting: str,
    input_name: str,
    spec: dict[str, Any],
    version_path: Path,
    rng: np.random.Generator,
) -> np.ndarray:
    dims = [int(d) for d in spec.get("dims", [])]
    if any(d < 1 for d in dims):
        raise _error(config, setting, f"input '{input_name}' has dims {dims}; expected sizes >= 1")
    try:
        datatype = datatypes.from_config_name(spec.get("data_type", ""))
    except KeyError:
        raise _error(
            config, setting, f"input '{input_name}' has data_type {spec.get('data_type')!r}"
        ) from None
    shape = [1, *dims] if config.max_batch_size > 0 else dims
    count = math.prod(shape)
    if "input_data_file" in spec:
        path = _data_file(config, setting, version_path, spec["input_data_file"])
        return _from_file(config, setting, input_name, path, datatype, shape, count)
    if datatype.dtype is None:  # BYTES: zero data (empty strings) for zero_data and random_data
        return np.full(shape, b"", dtype=object)
    if spec.get("random_data"):
        return _random(rng, datatype.dtype, shape)
    if spec.get("zero_data"):
        return np.zeros(shape, dtype=datatype.dtype)
    raise _error(
        config,
        setting,
        f"input '{input_name}' sets none of zero_data, random_data, input_data_file",
    )


def _random(rng: np.random.Generator, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    if dtype.kind == "f" or dtype.kind == "V":  # V: bfloat16 from ml_dtypes
        return rng.random(shape, dtype=np.float32).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 16, shape).astype(dtype)


def _data_file(config: ModelConfig, setting: str, version_path: Path, name: str) -> Path:
    """``<version>/warmup/<name>``; the model directory's ``warmup/`` as a fallback."""
    for base in (version_path, version_path.parent):
        path = base / WARMUP_DIR / name
        if path.is_file():
            return path
    raise _error(
        config, setting, f"input_data_file '{name}' not found in {version_path / WARMUP_DIR}"
    )


def _from_file(
    config: ModelConfig,
    setting: str,
    input_name: str,
    path: Path,
    datatype: datatypes.DataType,
    shape: list[int],
    count: int,
) -> np.ndarray:
    raw = path.read_bytes()
    if datatype.dtype is None:
        items = tensors.deserialize_bytes(raw, input_name)
        if len(items) != count:
            raise _error(
                config,
                setting,
                f"'{path.name}' holds {len(items)} strings; '{input_name}' "
                f"with shape {shape} needs {count}",
            )
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)
    expected = count * datatype.itemsize
    if len(raw) != expected:
        raise _error(
            config,
            setting,
            f"'{path.name}' has {len(raw)} bytes; '{input_name}' "
            f"({datatype.name} {shape}) needs {expected}",
        )
    return np.frombuffer(raw, dtype=datatype.dtype).reshape(shape)


def _error(config: ModelConfig, setting: str, message: str) -> ConchError:
    return invalid(f"model '{config.name}' model_warmup '{setting}': {message}")

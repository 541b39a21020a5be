"""Triton's auto-completed configuration, the part that needs no backend: which platform or
backend a model directory holds, read off its model files.

A configuration that names neither ``platform`` nor ``backend`` (or a model directory with no
``config.pbtxt`` at all) gets them from the first version directory's model file, as Triton does
unless it runs with ``--strict-model-config=true`` (``--disable-auto-complete-config``). Inputs
and outputs are completed by the backend that loads the model (``workers.loading.auto_complete``).
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

# Model file name -> (platform, backend), in the order Triton's backends claim them.
_BY_FILENAME = {
    "model.onnx": ("onnxruntime_onnx", "onnxruntime"),
    "model.plan": ("tensorrt_plan", "tensorrt"),
    "model.pt": ("pytorch_libtorch", "pytorch"),
    "model.pt2": ("pytorch_torch_export", "pytorch"),
    "model.py": ("", "python"),
    "model.xml": ("", "openvino"),
    "model.savedmodel": ("tensorflow_savedmodel", "tensorflow"),
}
_BY_SUFFIX = {Path(name).suffix: found for name, found in _BY_FILENAME.items()}


def fill_platform(message: pb.ModelConfig, model_dir: Path) -> None:
    """Set platform/backend from the model files when the configuration names neither."""
    if message.platform or message.backend:
        return
    found = detect(model_dir, message.default_model_filename)
    if found is not None:
        message.platform, message.backend = found


def detect(model_dir: Path, default_model_filename: str = "") -> tuple[str, str] | None:
    """(platform, backend) of the model file in the model's version directories, if any."""
    try:
        versions = sorted(
            (c for c in model_dir.iterdir() if c.is_dir() and c.name.isdigit()),
            key=lambda c: int(c.name),
        )
    except OSError:
        return None
    for version in reversed(versions):
        if default_model_filename:
            if (version / default_model_filename).exists():
                return _BY_SUFFIX.get(Path(default_model_filename).suffix)
            continue
        for filename, found in _BY_FILENAME.items():
            if (version / filename).exists():
                return found
    return None

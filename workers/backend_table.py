"""The backend table: backend name -> its implementation class.

Each backend's module is imported only when a worker asks for it, so a worker imports the one
backend it serves and not the others' heavy dependencies (onnxruntime, torch, tensorflow...).
"""

from __future__ import annotations

import importlib

from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend

BACKENDS: dict[str, str] = {
    "onnxruntime": "workers.onnxruntime.backend:OnnxRuntimeBackend",
    "pytorch": "workers.pytorch.backend:PyTorchBackend",
    "python": "workers.python.backend:PythonBackend",
    "tensorrt": "workers.tensorrt.backend:TensorRTBackend",
    "openvino": "workers.openvino.backend:OpenVinoBackend",
    "fil": "workers.fil.backend:FilBackend",
    "tensorflow": "workers.tensorflow.backend:TensorFlowBackend",
}


def load_backend(name: str) -> Backend:
    target = BACKENDS.get(name)
    if target is None:
        raise ConchError(
            ErrorCode.INVALID_ARG,
            f"unknown backend '{name}'; expected one of {', '.join(sorted(BACKENDS))}",
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConchError(
            ErrorCode.UNAVAILABLE,
            f"backend '{name}' cannot start: {exc} (install the matching extra, e.g. "
            f"pip install 'conch[{name}]')",
        ) from exc
    backend: Backend = getattr(module, class_name)()
    return backend

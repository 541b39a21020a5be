"""Triton's defaults: what a ``config.pbtxt`` means where it leaves a field out.

Applied to the protobuf message before it is typed, so the typed config, the JSON form that
``/v2/models/{m}/config`` returns and Triton's own answer agree.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as pb

# The backends with a worker service of their own (``workers/backend_table.py`` maps each to its
# class); any other backend a configuration names is a Python-based backend's.
WORKER_BACKENDS = ("onnxruntime", "pytorch", "python", "tensorrt", "openvino", "fil", "tensorflow")
# Triton's platform strings and the backend that serves each.
PLATFORM_BACKENDS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "pytorch_torch_export": "pytorch",
    "tensorrt_plan": "tensorrt",
    "tensorflow_savedmodel": "tensorflow",
    # Claimed so the tensorflow worker refuses it with a reason (workers.tensorflow), not a parse
    # error saying the backend is empty.
    "tensorflow_graphdef": "tensorflow",
    "ensemble": "ensemble",
}
BACKEND_PLATFORMS = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
    "tensorflow": "tensorflow_savedmodel",
}
# File names Triton looks for when default_model_filename is unset.
DEFAULT_MODEL_FILENAMES = {
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
    "python": "model.py",
    "openvino": "model.xml",
    "tensorflow": "model.savedmodel",
    # FIL's file depends on its model_type parameter (workers.fil): default_model_filename or
    # the backend's own choice.
}


def fill_defaults(message: pb.ModelConfig) -> None:
    """Triton's normalisation: backend from platform, one instance group, latest version."""
    if not message.backend and message.platform in PLATFORM_BACKENDS:
        message.backend = PLATFORM_BACKENDS[message.platform]
    if not message.platform and message.backend in BACKEND_PLATFORMS:
        message.platform = BACKEND_PLATFORMS[message.backend]
    if not message.HasField("version_policy"):
        message.version_policy.latest.num_versions = 1
    if message.platform != "ensemble" and not message.instance_group:
        message.instance_group.add()
    for index, group in enumerate(message.instance_group):
        if not group.name:
            group.name = f"{message.name}_{index}"
        if group.count == 0:
            group.count = 1
    if message.HasField("dynamic_batching"):
        batching = message.dynamic_batching
        if batching.priority_levels and not batching.default_priority_level:
            batching.default_priority_level = batching.priority_levels
        if not batching.preferred_batch_size and message.max_batch_size > 0:
            batching.preferred_batch_size.append(message.max_batch_size)
    if message.HasField("sequence_batching"):
        sequence = message.sequence_batching
        if not sequence.max_sequence_idle_microseconds:
            sequence.max_sequence_idle_microseconds = 1_000_000

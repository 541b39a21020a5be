"""Triton's OpenVINO backend parameters, read from ``config.pbtxt`` into what the backend does.

Pure (no ``openvino`` import), so the keys and their values are checked by unit tests on any
machine. The keys are Triton's (``parameters { key: "NUM_STREAMS" value: { string_value: "1" } }``
in the openvino_backend README); their values are read case-insensitively, as Triton reads
them, and a value Triton would refuse is refused here with the key, the value and what is
accepted.

Three defaults differ from OpenVINO's own, because a mesh node shares its cores between
gateways, a scheduler and several workers (the onnxruntime backend makes the same choice):

- ``INFERENCE_NUM_THREADS`` is 1 per instance unless the configuration says otherwise (0: the
  plugin's own choice, a thread per core); parallelism comes from ``instance_group { count }``;
- CPU pinning is off (``ENABLE_CPU_PINNING``, OpenVINO's own property name): pinned threads of
  several processes would all queue on the same cores;
- inference precision is f32 unless ``HINT_BF16`` is ``YES``: OpenVINO's CPU plugin otherwise
  picks bf16 on CPUs with AMX, and an answer must not change with the node a pod lands on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.wire.errors import ConchError, ErrorCode

# Keys read into OpenVINO compile properties (name -> the OpenVINO property it sets).
_THREAD_KEYS = {
    "INFERENCE_NUM_THREADS": "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS": "COMPILATION_NUM_THREADS",
}
_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
_YES_NO = ("YES", "NO")
# Keys that switch the backend's own behaviour (YES / NO).
_FLAG_KEYS = (
    "SKIP_OV_DYNAMIC_BATCHSIZE",
    "ENABLE_BATCH_PADDING",
    "RESHAPE_IO_LAYERS",
    "ENABLE_CPU_PINNING",
    "HINT_BF16",
)
KNOWN_KEYS = frozenset(
    (
        *_THREAD_KEYS,
        *_FLAG_KEYS,
        "PERFORMANCE_HINT",
        "NUM_STREAMS",
        "TARGET_DEVICE",
        "CPU_EXTENSION_PATH",
    )
)


@dataclass(frozen=True)
class OpenVinoOptions:
    """What a model's parameters ask of the backend."""

    # OpenVINO properties set on the CPU device before compiling (values as strings).
    properties: dict[str, str] = field(default_factory=dict)
    # Compile with the batch dimension fixed at max_batch_size (Triton's
    # SKIP_OV_DYNAMIC_BATCHSIZE); smaller batches are then padded or refused.
    skip_dynamic_batch: bool = False
    batch_padding: bool = False
    # Reshape the model's inputs to the configuration's dims (-1: dynamic).
    reshape_io_layers: bool = False
    cpu_extension_path: str = ""
    # Keys no OpenVINO backend knows: Triton ignores them; the worker logs them.
    ignored: tuple[str, ...] = ()


def parse(model: str, parameters: dict[str, str]) -> OpenVinoOptions:
    """The options of ``model``'s ``parameters``; ConchError(INVALID_ARG) naming a bad value."""
    properties = {
        "INFERENCE_NUM_THREADS": "1",
        "ENABLE_CPU_PINNING": "NO",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    flags = {key: _flag(model, key, parameters[key]) for key in _FLAG_KEYS if key in parameters}
    for key, prop in _THREAD_KEYS.items():
        if key in parameters:
            properties[prop] = str(_count(model, key, parameters[key]))
    if "PERFORMANCE_HINT" in parameters:
        properties["PERFORMANCE_HINT"] = _choice(
            model, "PERFORMANCE_HINT", parameters["PERFORMANCE_HINT"], _HINTS
        )
    if "NUM_STREAMS" in parameters:
        properties["NUM_STREAMS"] = _streams(model, parameters["NUM_STREAMS"])
    if "ENABLE_CPU_PINNING" in flags:
        properties["ENABLE_CPU_PINNING"] = "YES" if flags["ENABLE_CPU_PINNING"] else "NO"
    if "HINT_BF16" in parameters:
        # Triton accepts only YES here; NO is read as "leave the precision alone" (f32).
        properties["INFERENCE_PRECISION_HINT"] = "bf16" if flags["HINT_BF16"] else "f32"
    device = parameters.get("TARGET_DEVICE", "CPU").strip().upper()
    if device != "CPU":
        raise _bad(
            model,
            "TARGET_DEVICE",
            parameters["TARGET_DEVICE"],
            "CPU (this worker runs OpenVINO on CPU only; GPU, NPU, AUTO, MULTI and HETERO "
            "devices are not served)",
        )
    return OpenVinoOptions(
        properties=properties,
        skip_dynamic_batch=flags.get("SKIP_OV_DYNAMIC_BATCHSIZE", False),
        batch_padding=flags.get("ENABLE_BATCH_PADDING", False),
        reshape_io_layers=flags.get("RESHAPE_IO_LAYERS", False),
        cpu_extension_path=parameters.get("CPU_EXTENSION_PATH", "").strip(),
        ignored=tuple(sorted(key for key in parameters if key not in KNOWN_KEYS)),
    )


def _bad(model: str, key: str, value: str, expected: str) -> ConchError:
    return ConchError(
        ErrorCode.INVALID_ARG,
        f"model '{model}': expected the parameter '{key}' to be {expected}, got '{value}'",
    )


def _flag(model: str, key: str, value: str) -> bool:
    return _choice(model, key, value, _YES_NO) == "YES"


def _choice(model: str, key: str, value: str, allowed: tuple[str, ...]) -> str:
    normal = value.strip().upper()
    if normal not in allowed:
        raise _bad(model, key, value, "/".join(allowed))
    return normal


def _count(model: str, key: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit():
        raise _bad(model, key, value, "a non-negative number")
    return int(text)


def _streams(model: str, value: str) -> str:
    normal = value.strip().upper()
    if normal in ("AUTO", "NUMA"):
        return normal
    if normal.isdigit():
        return normal
    raise _bad(model, "NUM_STREAMS", value, "either AUTO/NUMA/<int_value>")

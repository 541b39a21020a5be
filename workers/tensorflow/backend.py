"""TensorFlow SavedModel: ``<version>/model.savedmodel/`` run through a session per instance.

Each instance loads the SavedModel into a TensorFlow session of its own (Triton's default,
``MAX_SESSION_SHARE_COUNT`` 1) with the graph tag and signature Triton's tensorflow backend
would pick, and runs the signature's tensors through a callable made once per set of inputs and
outputs: the same path TensorFlow Serving and Triton take, a little cheaper per call than an
eager ``ConcreteFunction``, and the only one where thread counts are a session's and not the
whole process's. The configuration's input and output names are the signature's keys.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before the import: no C++ INFO banners
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from shared.model_config import ModelConfig
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Backend, LoadSpec, ModelInstance, TensorModelInstance
from workers.tensorflow import signature as rules
from workers.tensorflow.parameters import SessionSettings

log = logging.getLogger(__name__)

GRAPHDEF_PLATFORM = "tensorflow_graphdef"


class TensorFlowBackend(Backend):
    name = "tensorflow"

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """Triton's tensorflow auto-complete: max_batch_size, inputs, outputs and dynamic
        batching from the serving signature (read off ``saved_model.pb``, no session made)."""
        if config.platform == GRAPHDEF_PLATFORM or not model_file.is_dir():
            return None
        settings = SessionSettings.from_parameters(config.name, config.parameters)
        meta = read_meta_graph(config.name, model_file, settings.graph_tag)
        signature = read_signature(config.name, meta, settings.signature_def)
        return rules.auto_complete(config, signature)

    def load(self, spec: LoadSpec) -> ModelInstance:
        config = spec.config
        if config.platform == GRAPHDEF_PLATFORM:
            raise ConchError(
                ErrorCode.UNSUPPORTED,
                f"model '{config.name}': platform 'tensorflow_graphdef' is not served (TensorFlow "
                "2 cannot run a frozen GraphDef without TF1 sessions and init ops); export the "
                "model as a SavedModel and use platform 'tensorflow_savedmodel'",
            )
        if not spec.model_file.is_dir():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"unable to find '{spec.model_file}' for model '{config.name}' version "
                f"{spec.version} (expected a SavedModel directory with saved_model.pb)",
            )
        if spec.instance_group.kind == "KIND_GPU":
            raise ConchError(
                ErrorCode.UNAVAILABLE,
                f"model '{config.name}' asks for KIND_GPU instances; the tensorflow backend runs "
                "on CPU (the tensorflow-cpu wheel): use KIND_CPU or KIND_AUTO",
            )
        return TensorFlowInstance(spec)


def read_meta_graph(model: str, path: Path, tag: str) -> meta_graph_pb2.MetaGraphDef:
    """The SavedModel's MetaGraphDef tagged ``tag`` (``saved_model.pb`` or ``.pbtxt``)."""
    saved = saved_model_pb2.SavedModel()
    binary, text = path / "saved_model.pb", path / "saved_model.pbtxt"
    try:
        if binary.is_file():
            saved.ParseFromString(binary.read_bytes())
        elif text.is_file():
            text_format.Parse(text.read_text(), saved)
        else:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"unable to load model '{model}': '{path}' has no saved_model.pb (expected a "
                "SavedModel directory, as tf.saved_model.save writes it)",
            )
    except (OSError, text_format.ParseError, ValueError) as exc:  # DecodeError is a ValueError
        raise ConchError(
            ErrorCode.INVALID_ARG, f"unable to load model '{model}': cannot read '{path}': {exc}"
        ) from exc
    for meta in saved.meta_graphs:
        if tag in meta.meta_info_def.tags:
            return meta
    found = [sorted(m.meta_info_def.tags) for m in saved.meta_graphs]
    raise ConchError(
        ErrorCode.INVALID_ARG,
        f"unable to load model '{model}', expected '{tag}' tag; the SavedModel's tag sets are "
        f"{found} (name another with the TF_GRAPH_TAG parameter)",
    )


def read_signature(
    model: str, meta: meta_graph_pb2.MetaGraphDef, requested: str
) -> rules.Signature:
    """The signature Triton serves (``TF_SIGNATURE_DEF``, else ``serving_default``)."""
    available = list(meta.signature_def)
    key = rules.choose_signature(model, available, requested)
    if key != (requested or rules.DEFAULT_SIGNATURE):
        log.warning(
            "unable to find serving signature 'serving_default'; using signature '%s'",
            key,
            extra={"model": model},
        )
    definition = meta.signature_def[key]
    return rules.Signature(
        key=key,
        inputs=_tensors(model, "input", definition.inputs),
        outputs=_tensors(model, "output", definition.outputs),
    )


def _tensors(model: str, kind: str, infos: Any) -> dict[str, rules.SignatureTensor]:
    tensors: dict[str, rules.SignatureTensor] = {}
    for key in sorted(infos):
        info = infos[key]
        type_name = types_pb2.DataType.Name(info.dtype)
        datatype = rules.DATATYPES.get(type_name)
        if datatype is None or not info.name:
            what = f"datatype '{type_name}'" if datatype is None else "composite tensor"
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"unable to process {kind} '{key}' for '{model}', unsupported {what}",
            )
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else [int(d.size) for d in shape.dim]
        tensors[key] = rules.SignatureTensor(key, info.name, datatype, dims)
    return tensors


def session_config(settings: SessionSettings) -> Any:
    """The session's threads (``TF_NUM_INTRA_THREADS``/``TF_NUM_INTER_THREADS``) and CPU only."""
    return tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=settings.intra_op_threads,
        inter_op_parallelism_threads=settings.inter_op_threads,
        use_per_session_threads=settings.per_session_threads,
        device_count={"GPU": 0},
    )


class TensorFlowInstance(TensorModelInstance):
    def __init__(self, spec: LoadSpec):
        super().__init__(spec.config)
        config = spec.config
        settings = SessionSettings.from_parameters(config.name, config.parameters)
        meta = read_meta_graph(config.name, spec.model_file, settings.graph_tag)
        self.signature = read_signature(config.name, meta, settings.signature_def)
        rules.check_config(config, self.signature)
        graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=graph, config=session_config(settings))
        try:
            with graph.as_default():
                tf.compat.v1.saved_model.loader.load(
                    self.session, [settings.graph_tag], str(spec.model_file)
                )
        except Exception as exc:
            self.session.close()
            raise ConchError(
                ErrorCode.INVALID_ARG, f"unable to load model '{config.name}': {exc}"
            ) from exc
        self._batched = config.max_batch_size > 0
        self._reshape_in = {s.name: s.reshape for s in config.inputs if s.reshape is not None}
        self._reshape_out = {
            s.name: s.dims for s in config.outputs if s.reshape is not None and s.dims.count(-1) < 2
        }
        self._callables: dict[tuple[tuple[str, ...], tuple[str, ...]], Callable[..., Any]] = {}
        self._lock = threading.Lock()
        log.info(
            "tensorflow session ready",
            extra={
                "model": config.name,
                "version": spec.version,
                "signature": self.signature.key,
                "threads": [settings.intra_op_threads, settings.inter_op_threads],
            },
        )

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        names, wanted = tuple(inputs), tuple(output_names)
        call = self._callables.get((names, wanted)) or self._make_callable(names, wanted)
        values = call(*(self._model_input(name, inputs[name]) for name in names))
        return {name: self._config_output(name, v) for name, v in zip(wanted, values, strict=True)}

    def _make_callable(self, names: tuple[str, ...], wanted: tuple[str, ...]) -> Callable[..., Any]:
        """A callable over the signature's tensors for these inputs and outputs (made once)."""
        for kind, keys, tensors in (
            ("input", names, self.signature.inputs),
            ("output", wanted, self.signature.outputs),
        ):
            unknown = [key for key in keys if key not in tensors]
            if unknown:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"unexpected inference {kind} {unknown} for model '{self.config.name}': "
                    f"signature '{self.signature.key}' has {kind}s {sorted(tensors)}",
                )
        with self._lock:
            call: Callable[..., Any] = self.session.make_callable(
                [self.signature.outputs[n].tensor_name for n in wanted],
                [self.signature.inputs[n].tensor_name for n in names],
            )
            self._callables[(names, wanted)] = call
        return call

    def _model_input(self, name: str, array: np.ndarray) -> np.ndarray:
        """The config's ``reshape`` applied (Triton reshapes before the framework sees it)."""
        shape = self._reshape_in.get(name)
        if shape is None:
            return array
        return array.reshape([array.shape[0], *shape] if self._batched else shape)

    def _config_output(self, name: str, value: Any) -> np.ndarray:
        array = np.asarray(value)
        dims = self._reshape_out.get(name)
        if dims is None:
            return array
        return array.reshape([array.shape[0], *dims] if self._batched else dims)

    def unload(self) -> None:
        self.session.close()

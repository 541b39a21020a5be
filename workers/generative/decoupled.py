"""The generative model as a decoupled Python model, the way Triton's vLLM backend is built.

The ``model.py`` the example script writes is::

    import triton_python_backend_utils as pb_utils
    from workers.generative.decoupled import GenerativeModel

    class TritonPythonModel(GenerativeModel):
        pb_utils = pb_utils

``execute`` hands every request to the continuous batching engine and returns at once; the
engine's thread sends the responses through each request's ``get_response_sender()``: one per
token with ``stream``, else one with the whole text, the last one flagged
``TRITONSERVER_RESPONSE_COMPLETE_FINAL``. A request whose sender reports ``is_cancelled()``
leaves the running batch at the next step (a watcher polls the senders of waiting requests
too) and is closed with a flags-only final response.
"""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np

from workers.generative import checkpoint
from workers.generative.engine import Engine
from workers.generative.events import FINISH_CANCELLED, FINISH_ERROR, Generation, GenerationEvent
from workers.generative.loop import EngineLoop
from workers.generative.metrics import FamilyMetrics
from workers.generative.params import ParameterError
from workers.generative.triton_inputs import GenerateOptions, read_request

CANCEL_POLL_S = 0.02
ENGINE_DEFAULTS = {"max_sequences": 32, "token_budget": 512, "static_batch_size": 1}


class ClientCancelled(Exception):
    """Raised from an emit callback: the engine drops the generation."""


def engine_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The engine's settings from ``config.pbtxt`` parameters (string values, as Triton's)."""
    parameters = config.get("parameters") or {}

    def value(key: str) -> str | None:
        entry = parameters.get(key)
        return entry.get("string_value") if isinstance(entry, dict) else entry

    settings: dict[str, Any] = {"batching": value("batching") or "continuous"}
    for key, default in ENGINE_DEFAULTS.items():
        text = value(key)
        try:
            settings[key] = int(text) if text is not None else default
        except ValueError:
            raise ValueError(f"parameter '{key}' must be an integer, got {text!r}") from None
    return settings


def instance_device(args: dict[str, Any]) -> str:
    """``cuda:<id>`` for a ``KIND_GPU`` instance (Triton's ``model_instance_kind``), else CPU."""
    if args.get("model_instance_kind") != "GPU":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "a KIND_GPU instance of a generative model needs CUDA, and torch sees none"
        )
    return f"cuda:{int(args.get('model_instance_device_id') or 0)}"


class GenerativeModel:
    pb_utils: Any = None  # triton_python_backend_utils, set by the generated model.py

    def initialize(self, args: dict[str, Any]) -> None:
        pb = self.pb_utils
        config = json.loads(args["model_config"])
        if not pb.using_decoupled_model_transaction_policy(config):
            raise pb.TritonModelException(
                f"model '{args['model_name']}' streams tokens: its config.pbtxt needs "
                "model_transaction_policy { decoupled: true }"
            )
        model, vocab = checkpoint.load(self.checkpoint_dir(args), instance_device(args))
        labels = {"model": args["model_name"], "version": str(args["model_version"])}
        self.engine = Engine(
            model, vocab, metrics=FamilyMetrics(pb, labels), **self.engine_settings(config)
        )
        self.loop = EngineLoop(self.engine).start()
        self._ids = itertools.count()
        self._senders: dict[str, Any] = {}
        self._senders_lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="cancel-watch", daemon=True)
        self._watcher.start()

    def checkpoint_dir(self, args: dict[str, Any]) -> Path:
        """Where the weights are: the version directory (a backend may read it elsewhere)."""
        return Path(args["model_repository"]) / str(args["model_version"])

    def engine_settings(self, config: dict[str, Any]) -> dict[str, Any]:
        """The engine's settings: config.pbtxt's parameters here; the tiny_llm backend
        (examples/backends) reads its model's model.json instead, as vLLM's backend does."""
        return engine_settings(config)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            self._start(request)
        return None

    def finalize(self) -> None:
        self._stopping.set()
        self.loop.stop()

    def _start(self, request: Any) -> None:
        pb = self.pb_utils
        sender = request.get_response_sender()
        try:
            options = read_request(pb, request)
            request_id = f"{request.request_id() or 'gen'}#{next(self._ids)}"
            generation = Generation(
                request_id,
                options.prompt,
                options.params,
                self._emitter(request_id, sender, options),
            )
            with self._senders_lock:
                self._senders[request_id] = sender
            self.engine.submit(generation)
        except ParameterError as exc:
            self._forget_latest(sender)
            error = pb.TritonError(str(exc), pb.TritonError.INVALID_ARG)
            sender.send(pb.InferenceResponse(error=error), flags=self._final)

    @property
    def _final(self) -> int:
        final: int = self.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL  # pb_utils is untyped
        return final

    def _forget_latest(self, sender: Any) -> None:
        with self._senders_lock:
            for key in [k for k, s in self._senders.items() if s is sender]:
                del self._senders[key]

    def _emitter(self, request_id: str, sender: Any, options: GenerateOptions) -> Any:
        pb = self.pb_utils
        text: list[str] = [] if options.exclude_input_in_output else [options.prompt]
        unsent = [0]  # tokens generated since the last response (held back by a stop string)

        def emit(event: GenerationEvent) -> None:
            if event.token_id is not None:
                unsent[0] += 1
            if event.finished:
                with self._senders_lock:
                    self._senders.pop(request_id, None)
            if event.finish_reason == FINISH_CANCELLED or (
                not event.finished and sender.is_cancelled()
            ):
                if not event.finished:
                    with self._senders_lock:
                        self._senders.pop(request_id, None)
                sender.send(None, flags=self._final)
                if not event.finished:
                    raise ClientCancelled(request_id)
                return
            if event.finish_reason == FINISH_ERROR:
                error = pb.TritonError(event.error, pb.TritonError.INTERNAL)
                sender.send(pb.InferenceResponse(error=error), flags=self._final)
                return
            if options.stream:
                if event.text or event.finished:
                    response = self._response(event, event.text, options, unsent[0])
                    unsent[0] = 0
                    sender.send(response, flags=self._final if event.finished else 0)
                return
            text.append(event.text)
            if event.finished:
                response = self._response(event, "".join(text), options, event.completion_tokens)
                sender.send(response, flags=self._final)

        return emit

    def _response(
        self, event: GenerationEvent, text: str, options: GenerateOptions, tokens: int
    ) -> Any:
        """``tokens``: generated tokens this response accounts for (all of them without
        ``stream``; with it, those since the previous response, so that they add up)."""
        pb = self.pb_utils
        outputs = [pb.Tensor("text_output", np.array([text.encode()], dtype=np.object_))]
        if event.finished and options.return_finish_reason:
            reason = (event.finish_reason or "").encode()
            outputs.append(pb.Tensor("finish_reason", np.array([reason], dtype=np.object_)))
        if event.finished and options.return_num_input_tokens:
            count = np.array([event.prompt_tokens], dtype=np.uint32)
            outputs.append(pb.Tensor("num_input_tokens", count))
        if options.return_num_output_tokens:
            outputs.append(pb.Tensor("num_output_tokens", np.array([tokens], dtype=np.uint32)))
        return pb.InferenceResponse(output_tensors=outputs)

    def _watch(self) -> None:
        """Cancels, in the engine, requests whose sender says so (waiting ones included)."""
        while not self._stopping.wait(CANCEL_POLL_S):
            with self._senders_lock:
                cancelled = [k for k, s in self._senders.items() if s.is_cancelled()]
            for request_id in cancelled:
                self.engine.cancel(request_id)

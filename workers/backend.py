"""The contract between the generic worker loop and a backend.

A backend turns a model version directory into :class:`ModelInstance` objects; an instance
executes a batch of requests and returns one result per request. Backends whose model is one
batched tensor call (ONNX Runtime, PyTorch, TensorRT) derive from :class:`TensorModelInstance`,
which concatenates the requests along the batch dimension, runs once and splits the outputs.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from shared.model_config import InstanceGroup, ModelConfig
from shared.wire.errors import ConchError, ErrorCode
from workers.batches import ragged


@dataclass(frozen=True)
class LoadSpec:
    """Everything a backend needs to load one instance of one model version."""

    config: ModelConfig
    version: int
    version_path: Path
    model_path: Path  # <repo>/<model>
    instance_group: InstanceGroup
    instance_index: int
    # "cpu", or "gpu" with a device id, resolved from the instance group's kind and the host.
    device: str = "cpu"
    device_id: int = 0

    @property
    def model_file(self) -> Path:
        return self.version_path / self.config.model_filename


@dataclass
class ModelRequest:
    id: str
    inputs: dict[str, np.ndarray]
    # Names of the outputs to return (already resolved: every output when none was asked for).
    requested_outputs: list[str]
    parameters: dict[str, Any] = field(default_factory=dict)
    # Triton's sequence id (uint64 or string; 0: none) and SEQUENCE_START/END flags, which the
    # Python backend's request.correlation_id() and request.flags() return.
    correlation_id: int | str = 0
    flags: int = 0
    # The caller's deadline (ms since epoch), priority as asked and tenant: what a call this
    # request makes (Python BLS) inherits.
    deadline_ms: int = 0
    priority: int = 0
    tenant: str = ""

    @property
    def batch_size(self) -> int:
        first = next(iter(self.inputs.values()), None)
        return int(first.shape[0]) if first is not None and first.ndim else 1


@dataclass
class ModelResult:
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: ConchError | None = None
    # The response's parameters (str, int or bool values), as Triton returns them.
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class Execution:
    """One result per request, in order, plus the phase durations Triton reports."""

    results: list[ModelResult]
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


class FrameSink(abc.ABC):
    """Where a decoupled model's responses go, each as it is sent (callable from any thread).

    ``parameters``: the response's parameters (a Python model's), if any. Every request gets
    exactly one ``final`` call (with outputs, with nothing, or with an
    error, which also ends it); calls for a request after its final are ignored."""

    @abc.abstractmethod
    def send(
        self,
        request_id: str,
        outputs: dict[str, np.ndarray] | None,
        error: ConchError | None,
        final: bool,
        parameters: dict[str, Any] | None = None,
    ) -> None: ...


class ModelInstance(abc.ABC):
    """One loaded copy of a model version; ``execute`` runs in a worker thread."""

    @abc.abstractmethod
    def execute(self, requests: list[ModelRequest]) -> Execution: ...

    def execute_decoupled(self, requests: list[ModelRequest], sink: FrameSink) -> Execution:
        """A decoupled model's execute: responses go to ``sink`` as they are sent, also after
        this returns (the results of the returned Execution are not used). Only the instances of
        backends with ``Backend.streams`` implement it."""
        raise ConchError(ErrorCode.UNSUPPORTED, "this backend does not serve decoupled models")

    def cancel(self, request_ids: list[str]) -> None:  # noqa: B027 - optional hook
        """These running requests were cancelled: a decoupled model sees ``is_cancelled()``."""

    def warmup(self) -> None:  # noqa: B027 - optional hook
        """Run the config's model_warmup samples; the version is READY only after this."""

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release the instance's resources."""


class Backend(abc.ABC):
    """A family of models a worker service can load, e.g. every ``onnxruntime_onnx`` model."""

    name: ClassVar[str]
    # Whether its instances implement ``execute_decoupled``: a model of a backend that cannot
    # stream is refused at load when its configuration asks for decoupled responses.
    streams: ClassVar[bool] = False

    def accepts(self, config: ModelConfig) -> bool:
        return config.backend == self.name

    def check_decoupled(self, config: ModelConfig) -> None:
        """Refuse ``model_transaction_policy { decoupled: true }`` where the backend cannot
        send a request's responses one by one (Triton's framework backends refuse it too)."""
        if config.decoupled and not self.streams:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"model '{config.name}': backend '{self.name}' does not serve decoupled models "
                "(model_transaction_policy.decoupled); the backends that stream are python and "
                "the Python-based backends of --backend-directory",
            )

    @abc.abstractmethod
    def load(self, spec: LoadSpec) -> ModelInstance: ...

    def check_host(self) -> None:  # noqa: B027 - optional hook
        """Raise ConchError with one clear line when this host cannot run the backend at all."""

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """Triton's auto-complete: the configuration (JSON form) with what the model file says
        filled in, or None when there is nothing to add (``workers.loading.auto_complete``)."""
        return None


class TensorModelInstance(ModelInstance):
    """Batch concatenation and splitting for backends that run one tensor call per batch."""

    def __init__(self, config: ModelConfig):
        self.config = config

    @abc.abstractmethod
    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        """Run the model on (batched) inputs; return at least the named outputs."""

    def execute(self, requests: list[ModelRequest]) -> Execution:
        config = self.config
        if config.max_batch_size == 0 or (len(requests) == 1 and not ragged.has_ragged(config)):
            return self._execute_each(requests)
        t0 = time.perf_counter_ns()
        # The config's inputs in its order, then a sequence model's controls and implicit
        # states (the config lists them elsewhere).
        first = requests[0].inputs
        names = [n for n in self.config.input_names if n in first]
        names += [n for n in first if n not in names]
        batched = {
            name: ragged.concatenate(config, name, [r.inputs[name] for r in requests])
            for name in names
        }
        wanted = _union_outputs(requests)
        t1 = time.perf_counter_ns()
        try:
            outputs = self.run(batched, wanted)
        except ConchError as exc:
            return Execution([ModelResult(error=exc) for _ in requests])
        except Exception as exc:  # the model failed: every request of the batch gets the error
            error = ConchError(ErrorCode.INTERNAL, f"model '{self.config.name}' failed: {exc}")
            return Execution([ModelResult(error=error) for _ in requests])
        t2 = time.perf_counter_ns()
        total = sum(request.batch_size for request in requests)
        scattered: dict[str, list[np.ndarray]] = {}
        if config.batch_outputs:  # BATCH_SCATTER_WITH_INPUT_SHAPE: split by the input's shapes
            problem = _scatter(config, outputs, wanted, requests, scattered)
            if problem is not None:
                return Execution([ModelResult(error=problem) for _ in requests])
        rowed = [name for name in wanted if name not in scattered]
        problem = _check_outputs(config.name, outputs, rowed, total)
        if problem is not None:
            return Execution([ModelResult(error=problem) for _ in requests])
        results: list[ModelResult] = []
        offset = 0
        for index, request in enumerate(requests):
            size = request.batch_size
            results.append(
                ModelResult(
                    outputs={
                        name: scattered[name][index]
                        if name in scattered
                        else outputs[name][offset : offset + size]
                        for name in request.requested_outputs
                    }
                )
            )
            offset += size
        t3 = time.perf_counter_ns()
        return Execution(results, t1 - t0, t2 - t1, t3 - t2)

    def _execute_each(self, requests: list[ModelRequest]) -> Execution:
        results: list[ModelResult] = []
        infer_ns = 0
        for request in requests:
            t0 = time.perf_counter_ns()
            try:
                outputs = self.run(request.inputs, request.requested_outputs)
                results.append(
                    ModelResult(outputs={n: outputs[n] for n in request.requested_outputs})
                )
            except ConchError as exc:
                results.append(ModelResult(error=exc))
            except Exception as exc:
                error = ConchError(ErrorCode.INTERNAL, f"model '{self.config.name}' failed: {exc}")
                results.append(ModelResult(error=error))
            infer_ns += time.perf_counter_ns() - t0
        return Execution(results, 0, infer_ns, 0)


def _check_outputs(
    model: str, outputs: dict[str, np.ndarray], wanted: list[str], batch: int
) -> ConchError | None:
    """A batched output must exist and have one row per batched input row."""
    for name in wanted:
        value = outputs.get(name)
        if value is None:
            return ConchError(
                ErrorCode.INTERNAL, f"model '{model}' did not produce output '{name}'"
            )
        if value.ndim == 0 or value.shape[0] != batch:
            return ConchError(
                ErrorCode.INTERNAL,
                f"model '{model}' output '{name}' has shape {list(value.shape)}; expected a "
                f"first (batch) dimension of {batch}",
            )
    return None


def _scatter(
    config: ModelConfig,
    outputs: dict[str, np.ndarray],
    wanted: list[str],
    requests: list[ModelRequest],
    into: dict[str, list[np.ndarray]],
) -> ConchError | None:
    """Split each ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output into ``into`` (``ragged``)."""
    for name in wanted:
        shapes = ragged.scatter_shapes(config, name, [r.inputs for r in requests])
        if shapes is None:
            continue
        value = outputs.get(name)
        try:
            if value is None:
                raise ValueError("was not produced")
            into[name] = ragged.scatter(value, shapes)
        except ValueError as exc:
            return ConchError(ErrorCode.INTERNAL, f"model '{config.name}' output '{name}' {exc}")
    return None


def _union_outputs(requests: list[ModelRequest]) -> list[str]:
    seen: dict[str, None] = {}
    for request in requests:
        for name in request.requested_outputs:
            seen.setdefault(name, None)
    return list(seen)

"""Triton-compatible Python backend: each instance is a ``model.py`` running in its own process.

The worker side (this module) owns the process lifecycle: spawn and wait for ``initialize``,
send each batch and wait for the replies or the process's death, restart a process that died,
and call ``finalize`` on unload. A crash (``os._exit``, a signal) fails only the batch that was
executing, with UNAVAILABLE and a message naming the exit; the instance restarts in the
background and the next batch runs on the new process. Batches are not retried on the new
process: a request that kills its model would otherwise kill it twice.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from shared.model_config import ModelConfig
from shared.wire import datatypes
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import (
    Backend,
    Execution,
    FrameSink,
    LoadSpec,
    ModelInstance,
    ModelRequest,
    ModelResult,
)
from workers.python import custom_metrics, execution_env, ipc, stub
from workers.python.based_backends import BackendDirectories
from workers.python.model_process import CONTEXT, ModelProcess, ModelProcessDied, exit_text

log = logging.getLogger(__name__)

AUTO_COMPLETE_TIMEOUT_S = 120.0


# Every live instance of this worker, for the scrape of their custom metrics.
INSTANCES: weakref.WeakSet[PythonModelInstance] = weakref.WeakSet()


class PythonBackend(Backend):
    name = "python"
    streams = True

    def __init__(self, backend_directory: str | None = None) -> None:
        custom_metrics.register(lambda: [i.custom_metrics for i in list(INSTANCES)])
        # Where Python-based backends are (None: the worker's setting, from the environment).
        self.directories = BackendDirectories(backend_directory)

    def accepts(self, config: ModelConfig) -> bool:
        return self.directories.accepts(config)

    def auto_complete(self, config: ModelConfig, model_file: Path) -> dict[str, Any] | None:
        """The model's own ``auto_complete_config``, run in a short-lived model process (its
        imports and state die with it, as in Triton); None when the model defines none. A
        Python-based backend's model.py is its backend directory's, its data the version's."""
        version_dir = model_file.parent if config.model_filename else model_file
        model_file = self.directories.model_file(config, version_dir)
        try:
            source = model_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        if "auto_complete_config" not in source:
            return None
        conn, child_conn = CONTEXT.Pipe(duplex=True)
        process = CONTEXT.Process(
            target=stub.auto_complete,
            args=(
                child_conn,
                str(model_file),
                config.to_json(),
                execution_env.site_packages(config, version_dir.parent),
                str(version_dir),
            ),
            name=f"pb-autocomplete-{config.name}",
            daemon=True,
        )
        process.start()
        child_conn.close()
        try:
            if not conn.poll(AUTO_COMPLETE_TIMEOUT_S):
                raise ConchError(
                    ErrorCode.INTERNAL,
                    f"auto_complete_config of '{config.name}' did not return within "
                    f"{AUTO_COMPLETE_TIMEOUT_S:.0f} s",
                )
            try:
                status, value = ipc.recv(conn)
            except (EOFError, OSError):
                process.join(5)
                raise ConchError(
                    ErrorCode.INTERNAL,
                    f"auto_complete_config of '{config.name}': the model process "
                    f"{exit_text(process)}",
                ) from None
        finally:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
            conn.close()
        if status != "ok":
            raise ConchError(
                ErrorCode.INVALID_ARG, f"auto_complete_config of '{config.name}' failed: {value}"
            )
        completed: dict[str, Any] | None = value  # from the model's process (untyped)
        return completed

    def load(self, spec: LoadSpec) -> ModelInstance:
        model_file = self.directories.model_file(spec.config, spec.version_path)
        if not model_file.is_file():
            raise ConchError(
                ErrorCode.NOT_FOUND,
                f"model '{spec.config.name}' version {spec.version}: no file '{model_file}' "
                "(expected a model.py defining TritonPythonModel)",
            )
        return PythonModelInstance(spec, model_file)


def initialize_args(spec: LoadSpec) -> dict[str, str]:
    """The ``args`` dict Triton passes to ``initialize``: every value a string."""
    return {
        "model_config": json.dumps(spec.config.to_json()),
        "model_instance_kind": {"gpu": "GPU", "model": "MODEL"}.get(spec.device, "CPU"),
        "model_instance_name": f"{spec.instance_group.name}_{spec.instance_index}",
        "model_instance_device_id": str(spec.device_id),
        "model_repository": str(spec.model_path),
        "model_version": str(spec.version),
        "model_name": spec.config.name,
    }


class PythonModelInstance(ModelInstance):
    """One model instance: a process, restarted when it dies; batches run one at a time."""

    start_timeout_s = 300.0  # initialize may load large weights
    finalize_timeout_s = 30.0

    def __init__(self, spec: LoadSpec, model_file: Path | None = None):
        self.spec = spec
        self.config: ModelConfig = spec.config
        self.restarts = 0
        self._closed = False
        self._lock = threading.Lock()
        self._init: dict[str, Any] = {
            "model_file": str(model_file or spec.model_file),
            "model_dir": str(spec.version_path),  # pb_utils.get_model_dir()
            # EXECUTION_ENV_PATH: the packed environment's packages, first on the import path.
            "env_site": execution_env.site_packages(spec.config, spec.model_path),
            "args": initialize_args(spec),
            "log_level": logging.getLogger().getEffectiveLevel(),
            "log_format": os.environ.get("CONCH_LOG_FORMAT", "json"),
        }
        self.name = self._init["args"]["model_instance_name"]
        # A decoupled model's open streams: request id -> where its frames go.
        self._sinks: dict[str, FrameSink] = {}
        self._process: ModelProcess | None = self._new_process()
        self.custom_metrics = self._process.custom_metrics
        INSTANCES.add(self)

    @property
    def pid(self) -> int | None:
        """The model process's id (changes when the instance restarts)."""
        process = self._process
        return process.pid if process else None

    def _new_process(self) -> ModelProcess:
        if not self.config.decoupled:
            return ModelProcess(self._init, self.start_timeout_s)
        return ModelProcess(self._init, self.start_timeout_s, self._on_frame, self._on_exit)

    def _on_frame(self, message: tuple[Any, ...]) -> None:
        """A decoupled model's response, on the process's reader thread."""
        _, request_id, outputs, error, final, *more = message
        sink = self._sinks.pop(request_id, None) if final else self._sinks.get(request_id)
        if sink is None:
            return
        problem = ConchError(ErrorCode(error[0]), error[1]) if error else None
        arrays = {n: self._coerce(n, a) for n, a in outputs.items()} if outputs else None
        sink.send(request_id, arrays, problem, final, more[0] if more else None)

    def _on_exit(self, how: str) -> None:
        """The process died: every stream still open ends with the cause."""
        if self._closed:
            return
        sinks, self._sinks = self._sinks, {}
        error = ConchError(
            ErrorCode.UNAVAILABLE,
            f"python model '{self.config.name}' instance '{self.name}': {how} while streaming "
            "responses; the stream ended",
        )
        for request_id, sink in sinks.items():
            sink.send(request_id, None, error, True)

    def execute_decoupled(self, requests: list[ModelRequest], sink: FrameSink) -> Execution:
        for request in requests:
            self._sinks[request.id] = sink
        execution = self.execute(requests)
        for request, result in zip(requests, execution.results, strict=True):
            if result.error is not None and self._sinks.pop(request.id, None) is not None:
                sink.send(request.id, None, result.error, True)
        return execution

    def cancel(self, request_ids: list[str]) -> None:
        process = self._process
        if process is not None:
            try:
                process.send(("cancel", request_ids))
            except Exception:  # the process is gone: its streams end with that
                log.debug("cancel not delivered to %s", self.name)

    def execute(self, requests: list[ModelRequest]) -> Execution:
        payload = [
            (
                r.id,
                r.inputs,
                r.requested_outputs,
                json.dumps(r.parameters, default=str),
                r.correlation_id,
                r.flags,
                (r.deadline_ms, r.priority, r.tenant),
            )
            for r in requests
        ]
        with self._lock:
            try:
                process = self._process or self._start()
                level = logging.getLogger().getEffectiveLevel()
                _, replies, infer_ns, families = process.call(("execute", payload, level))
                if families is not None:
                    self.custom_metrics = families
            except ConchError as exc:  # could not (re)start the process
                return Execution([ModelResult(error=exc) for _ in requests])
            except ModelProcessDied as exc:
                process.stop(0)  # reap it and close the pipe
                self._process = None
                threading.Thread(
                    target=self._restart, name=f"restart-{self.name}", daemon=True
                ).start()
                error = ConchError(
                    ErrorCode.UNAVAILABLE,
                    f"python model '{self.config.name}' instance '{self.name}': {exc}; "
                    "the instance is restarting, retry the request",
                )
                return Execution([ModelResult(error=error) for _ in requests])
        if self.config.decoupled:  # the responses went to the sinks
            return Execution([ModelResult() for _ in requests], 0, infer_ns, 0)
        return Execution([self._result(reply) for reply in replies], 0, infer_ns, 0)

    def _start(self) -> ModelProcess:
        """Start a replacement process (the first one is started by ``__init__``)."""
        if self._closed:
            raise ConchError(ErrorCode.UNAVAILABLE, f"model instance '{self.name}' is unloaded")
        self.restarts += 1
        self._process = self._new_process()
        self.custom_metrics = self._process.custom_metrics
        return self._process

    def _restart(self) -> None:
        with self._lock:
            if self._process is not None or self._closed:
                return
            try:
                self._start()
                log.warning("python model instance restarted", extra={"instance": self.name})
            except ConchError as exc:  # the next batch tries again and reports this
                log.error("python model instance restart failed: %s", exc.message)

    def _result(self, reply: tuple[Any, ...]) -> ModelResult:
        if reply[0] == "error":
            return ModelResult(error=ConchError(ErrorCode(reply[1]), reply[2]))
        outputs = {n: self._coerce(n, a) for n, a in reply[1].items()}
        return ModelResult(outputs=outputs, parameters=reply[2] if len(reply) > 2 else {})

    def _coerce(self, name: str, array: np.ndarray) -> np.ndarray:
        """Outputs carry the config's datatype (a model may compute in another width)."""
        spec = self.config.output(name)
        expected = datatypes.BY_NAME[spec.datatype].dtype if spec else None
        if expected is not None and array.dtype != expected:
            return array.astype(expected)
        return array

    def unload(self) -> None:
        INSTANCES.discard(self)
        with self._lock:
            self._closed = True
            process, self._process = self._process, None
        if process is not None:
            error = process.stop(self.finalize_timeout_s)
            if error:
                log.error("finalize of %s failed: %s", self.name, error)

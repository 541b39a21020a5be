"""The model process of the Python backend: Triton's "stub", one per model instance.

It imports the model's ``model.py`` with ``triton_python_backend_utils`` importable, calls
``initialize(args)``, then answers execute/finalize messages from the worker until the pipe closes.
Running each instance in its own process keeps the GIL, global state and crashes of one model
(``os._exit``, a segfault in an extension) away from the worker and from the other instances.

This module imports nothing heavy (no torch, no protobuf): a spawned process starts quickly.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import site
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from workers.python import bls_caller, ipc, stub_async, stub_decoupled

UTILS_DIR = str(Path(__file__).resolve().parent)

# Replies for one request: ("ok", {name: array}) or ("error", code_name, message).
Reply = tuple[Any, ...]


def main(conn: Connection, init: dict[str, Any]) -> None:
    """Entry point of the spawned process; returns (and exits) when the worker goes away."""
    # The worker decides when we stop (and calls finalize first): a SIGTERM or Ctrl-C sent to
    # the whole process group must not kill the model before that.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent()
    _setup_logging(init)
    try:
        pb_utils, model = _load(init)
    except BaseException as exc:  # initialize failed: report it and exit
        ipc.send(conn, ("error", _describe(exc)))
        return
    import pb_metrics  # beside pb_utils, importable once _load has set the path

    config = json.loads(init["args"]["model_config"])
    # Responses from any thread (decoupled models); cancels at any time (every model).
    link = stub_decoupled.Link(conn)
    recv, send = link.recv, link.send
    decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    seen, families = pb_metrics.snapshot(0)
    send(("ready", os.getpid(), families))
    while True:
        try:
            message = recv()
        except (EOFError, OSError):
            return  # the worker is gone; nothing left to answer
        op, payload = message[0], message[1]
        if op == "execute":
            if len(message) > 2 and message[2] != logging.getLogger().level:
                logging.getLogger().setLevel(message[2])  # the fleet's level changed
            t0 = time.perf_counter_ns()
            name = init["args"]["model_name"]
            if not decoupled:
                replies = _execute(pb_utils, model, name, payload, link)
            else:
                replies = []
                requests = [_request(pb_utils, name, item) for item in payload]
                bls_caller.current = _batch_caller(payload, name)
                stub_decoupled.execute(pb_utils, model, link, requests, _await, _describe)
            elapsed = time.perf_counter_ns() - t0
            seen, families = pb_metrics.snapshot(seen)
            send(("results", replies, elapsed, families))
        elif op == "finalize":
            error = None
            if hasattr(model, "finalize"):
                try:
                    model.finalize()
                except Exception as exc:
                    error = _describe(exc)
            send(("finalized", error))
            return


def _setup_logging(init: dict[str, Any]) -> None:
    """The worker's log format, every line naming the model and the instance."""
    from shared.runtime import logs

    args = init["args"]
    logs.setup(
        "worker",
        logging.getLevelName(init.get("log_level", logging.INFO)),
        init.get("log_format", "json"),
    )
    model, instance = args["model_name"], args["model_instance_name"]

    def tag(record: logging.LogRecord) -> bool:
        record.model = model
        record.instance = instance
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(tag)


def auto_complete(
    conn: Connection, model_file: str, config: dict[str, Any], env_site: str = "", version: str = ""
) -> None:
    """Entry point of a short-lived process: the model class's ``auto_complete_config`` on the
    configuration; answers ("ok", completed JSON) or ("error", message)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    try:
        pb_utils, module = _import_model(model_file, env_site, version)
        method = getattr(module.TritonPythonModel, "auto_complete_config", None)
        completed = pb_utils.ModelConfig(config)
        if method is not None:
            completed = _await(method(completed))
            if not isinstance(completed, pb_utils.ModelConfig):
                raise pb_utils.TritonModelException(
                    "auto_complete_config returned "
                    f"{type(completed).__name__}, expected pb_utils.ModelConfig"
                )
        ipc.send(conn, ("ok", completed.as_dict()))
    except BaseException as exc:
        ipc.send(conn, ("error", _describe(exc)))


def _exit_with_parent() -> None:
    """A model stuck in execute never reads the pipe's EOF; leave when the worker is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _import_model(
    model_file: str, env_site: str = "", model_dir: str = ""
) -> tuple[ModuleType, ModuleType]:
    """pb_utils and the model's module; ``env_site``: its EXECUTION_ENV_PATH, imported first;
    ``model_dir``: the version directory (``get_model_dir()``; a Python-based backend's model.py
    lives elsewhere)."""
    if env_site and env_site not in sys.path:
        before = list(sys.path)
        site.addsitedir(env_site)  # its .pth files too, as the environment's interpreter would
        sys.path[:] = [p for p in sys.path if p not in before] + before
    if UTILS_DIR not in sys.path:
        sys.path.insert(0, UTILS_DIR)
    version_dir = str(Path(model_file).parent)
    if version_dir not in sys.path:  # helper modules beside model.py import as in Triton
        sys.path.insert(1, version_dir)
    import triton_python_backend_utils as pb_utils

    pb_utils._model_dir = model_dir or version_dir
    spec = importlib.util.spec_from_file_location("model", model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise pb_utils.TritonModelException(f"{model_file} defines no class 'TritonPythonModel'")
    return pb_utils, module


def _load(init: dict[str, Any]) -> tuple[ModuleType, Any]:
    pb_utils, module = _import_model(
        init["model_file"], init.get("env_site", ""), init.get("model_dir", "")
    )
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):
        _await(model.initialize(dict(init["args"])))
    return pb_utils, model


def _batch_caller(payload: list[Any], model_name: str) -> Any:
    """Who the batch's BLS calls act for: its requests' priority, tenant and deadline, and the
    requests themselves (cancelling them cancels the calls)."""
    return bls_caller.batch_caller(
        [bls_caller.Caller(*item[6]) for item in payload if len(item) > 6],
        model_name,
        [item[0] for item in payload],
    )


def _execute(
    pb_utils: ModuleType,
    model: Any,
    model_name: str,
    payload: list[Any],
    link: stub_decoupled.Link,
) -> list[Reply]:
    """Run execute on the batch; when it raises, run each request alone so that only the
    request that caused the exception fails (Triton would fail the whole batch). The requests
    see ``is_cancelled()`` turn true when the worker says so meanwhile."""
    requests = [_request(pb_utils, model_name, item) for item in payload]
    for request in requests:
        request._cancelled = link.is_cancelled
    bls_caller.current = _batch_caller(payload, model_name)
    try:
        return _run_batch(pb_utils, model, requests)
    finally:
        for request in requests:
            link.forget(request.request_id())


def _run_batch(pb_utils: ModuleType, model: Any, requests: list[Any]) -> list[Reply]:
    try:
        return _run(pb_utils, model, requests)
    except Exception as exc:
        if len(requests) == 1:
            return [_error_reply(pb_utils, exc)]
    replies: list[Reply] = []
    for request in requests:
        try:
            replies.extend(_run(pb_utils, model, [request]))
        except Exception as exc:
            replies.append(_error_reply(pb_utils, exc))
    return replies


def _request(pb_utils: ModuleType, model_name: str, item: tuple[Any, ...]) -> Any:
    request_id, inputs, requested, parameters, correlation_id, flags = item[:6]
    return pb_utils.InferenceRequest(
        model_name=model_name,
        requested_output_names=requested,
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        request_id=request_id,
        correlation_id=correlation_id,
        flags=flags,
        parameters=parameters,
    )


def _run(pb_utils: ModuleType, model: Any, requests: list[Any]) -> list[Reply]:
    responses = _await(model.execute(requests))
    if responses is None or len(responses) != len(requests):
        got = "None" if responses is None else f"{len(responses)} responses"
        raise pb_utils.TritonModelException(
            f"execute returned {got} for {len(requests)} requests; expected one response each "
            "(a model that answers through response senders needs model_transaction_policy "
            "{ decoupled: true })"
        )
    return [_reply(pb_utils, req, resp) for req, resp in zip(requests, responses, strict=True)]


def _reply(pb_utils: ModuleType, request: Any, response: Any) -> Reply:
    if not isinstance(response, pb_utils.InferenceResponse):
        return (
            "error",
            "INTERNAL",
            f"execute returned {type(response).__name__}, expected pb_utils.InferenceResponse",
        )
    if response.has_error():
        error = response.error()
        return ("error", pb_utils.TritonError.CODE_NAMES[error.code()], error.message())
    produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
    outputs: dict[str, np.ndarray] = {}
    for name in request.requested_output_names():
        if name not in produced:
            return (
                "error",
                "INTERNAL",
                f"the model returned no output '{name}' (it returned {sorted(produced)})",
            )
        outputs[name] = _host_array(produced[name])
    return ("ok", outputs, json.loads(response.parameters() or "{}"))


_host_array = stub_decoupled.host_array


def _error_reply(pb_utils: ModuleType, exc: BaseException) -> Reply:
    if isinstance(exc, pb_utils.TritonModelException):
        return ("error", "INTERNAL", str(exc))
    return ("error", "INTERNAL", _describe(exc))


def _describe(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


# ``async def execute``/``initialize`` are allowed, as in Triton (one loop per thread, kept).
_await = stub_async.await_

"""Decoupled Python models in real model processes (no mesh): response senders from execute and
from threads after it returned, ``async def execute``, ``is_cancelled()``, Triton's errors, and
a model process that dies mid-stream.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from shared.model_config import parse_pbtxt
from shared.storage.repository import RepositoryModel
from workers.backend import FrameSink, LoadSpec, ModelInstance, ModelRequest
from workers.python.backend import PythonBackend

CONFIG = """
name: "d"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
HEAD = """
import asyncio, os, threading, time
import numpy as np
import triton_python_backend_utils as pb_utils

def out(value):
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))])

def n_of(request):
    return int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

class TritonPythonModel:
"""


class Frames(FrameSink):
    """Every frame per request, and an event per request set by its final."""

    def __init__(self) -> None:
        self.frames: dict[str, list[tuple[list[int] | None, str | None, bool]]] = {}
        self.ended: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def expect(self, *ids: str) -> None:
        for request_id in ids:
            self.ended[request_id] = threading.Event()

    def send(self, request_id, outputs, error, final, parameters=None) -> None:
        value = outputs["OUT"].tolist() if outputs else None
        with self.lock:
            self.frames.setdefault(request_id, []).append(
                (value, error.message if error else None, final)
            )
        if final:
            self.ended[request_id].set()

    def wait(self, timeout_s: float = 20) -> None:
        for request_id, event in self.ended.items():
            assert event.wait(timeout_s), f"no final frame for {request_id}"


@pytest.fixture
def loaded() -> Iterator[list[ModelInstance]]:
    instances: list[ModelInstance] = []
    yield instances
    for instance in instances:
        instance.unload()


def _model(tmp_path: Path, body: str, instances: list[ModelInstance]) -> ModelInstance:
    version = tmp_path / "d" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(HEAD + body)
    config = parse_pbtxt(CONFIG)
    model = RepositoryModel("d", tmp_path / "d", config, [1])
    spec = LoadSpec(config, 1, model.version_path(1), model.path, config.instance_groups[0], 0)
    instance = PythonBackend().load(spec)
    instances.append(instance)
    return instance


def _request(request_id: str, n: int) -> ModelRequest:
    return ModelRequest(request_id, {"IN": np.array([n], dtype=np.int32)}, ["OUT"])


def test_senders_answer_zero_one_and_many_from_threads_after_execute(
    tmp_path: Path, loaded: list[ModelInstance]
) -> None:
    instance = _model(
        tmp_path,
        """
    def execute(self, requests):
        for request in requests:
            sender, n = request.get_response_sender(), n_of(request)
            def respond(sender=sender, n=n):
                time.sleep(0.2)  # execute has returned by now
                for i in range(n):
                    sender.send(out(i))
                sender.send(flags=FINAL)
            threading.Thread(target=respond).start()
        return None
""",
        loaded,
    )
    sink = Frames()
    sink.expect("zero", "one", "many")
    instance.execute_decoupled([_request("zero", 0), _request("one", 1), _request("many", 4)], sink)
    sink.wait()
    assert sink.frames["zero"] == [(None, None, True)]
    assert sink.frames["one"] == [([0], None, False), (None, None, True)]
    assert sink.frames["many"] == [([i], None, False) for i in range(4)] + [(None, None, True)]


def test_async_execute_a_final_with_outputs_and_sender_errors(
    tmp_path: Path, loaded: list[ModelInstance]
) -> None:
    instance = _model(
        tmp_path,
        """
    async def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            await asyncio.sleep(0)
            sender.send(out(n_of(request)), flags=FINAL)
            try:
                sender.send(out(0))
            except pb_utils.TritonModelException as exc:
                pb_utils.Logger.log_info(str(exc))
                if "has been closed" not in str(exc):
                    raise
        return None
""",
        loaded,
    )
    sink = Frames()
    sink.expect("a")
    instance.execute_decoupled([_request("a", 7)], sink)
    sink.wait()
    assert sink.frames["a"] == [([7], None, True)]


def test_execute_returning_responses_or_raising_ends_the_open_streams(
    tmp_path: Path, loaded: list[ModelInstance]
) -> None:
    instance = _model(
        tmp_path,
        """
    def execute(self, requests):
        if n_of(requests[0]) == 1:
            raise ValueError("broken")
        return [out(0) for _ in requests]
""",
        loaded,
    )
    sink = Frames()
    sink.expect("raises", "returns")
    instance.execute_decoupled([_request("raises", 1)], sink)
    instance.execute_decoupled([_request("returns", 2)], sink)
    sink.wait()
    ((_, raised, final),) = sink.frames["raises"]
    assert final and "ValueError: broken" in raised
    ((_, returned, final),) = sink.frames["returns"]
    assert final and "execute function must return None" in returned


def test_is_cancelled_reaches_a_running_request(
    tmp_path: Path, loaded: list[ModelInstance]
) -> None:
    instance = _model(
        tmp_path,
        """
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            sent = 0
            while not request.is_cancelled() and sent < 1000:
                sender.send(out(sent))
                sent += 1
                time.sleep(0.01)
            sender.send(out(-sent), flags=FINAL)
        return None
""",
        loaded,
    )
    sink = Frames()
    sink.expect("c")
    worker = threading.Thread(target=instance.execute_decoupled, args=([_request("c", 0)], sink))
    worker.start()
    while len(sink.frames.get("c", [])) < 3:
        threading.Event().wait(0.01)
    instance.cancel(["c"])
    sink.wait()
    worker.join(10)
    last_value, _, final = sink.frames["c"][-1]
    assert final and last_value is not None and -last_value[0] < 1000  # stopped early


def test_a_model_process_killed_mid_stream_ends_it_with_the_cause(
    tmp_path: Path, loaded: list[ModelInstance]
) -> None:
    instance = _model(
        tmp_path,
        """
    def execute(self, requests):
        sender = requests[0].get_response_sender()
        sender.send(out(os.getpid()))
        time.sleep(60)
        return None
""",
        loaded,
    )
    sink = Frames()
    sink.expect("k")
    worker = threading.Thread(target=instance.execute_decoupled, args=([_request("k", 0)], sink))
    worker.start()
    while not sink.frames.get("k"):
        threading.Event().wait(0.01)
    pid = sink.frames["k"][0][0][0]
    os.kill(pid, signal.SIGKILL)
    sink.wait()
    worker.join(10)
    _, error, final = sink.frames["k"][-1]
    assert final and "was killed by SIGKILL" in error and "the stream ended" in error

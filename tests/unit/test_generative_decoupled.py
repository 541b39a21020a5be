"""The generative model's decoupled ``model.py`` logic, in process, against Triton's
``pb_utils`` (the project's copy) and a small fake of the response sender.

The mesh path (tritonclient's gRPC stream, ``/generate_stream``) is
tests/e2e/test_generative_e2e.py.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.unit.generative_helpers import VOCAB, greedy_direct, seeded_model
from workers.generative import checkpoint
from workers.generative.decoupled import GenerativeModel, engine_settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers" / "python"))
import pb_metrics
import triton_python_backend_utils as pb_utils

from tests.waiting import until_sync

sys.path.pop(0)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
CONFIG = {
    "name": "tiny_gpt",
    "model_transaction_policy": {"decoupled": True},
    "parameters": {"max_sequences": {"string_value": "4"}},
}


class FakeSender:
    """Triton's InferenceResponseSender, recording what the model sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []
        self.cancelled = False
        self.done = threading.Event()
        self.after_send: Any = None

    def send(self, response: Any = None, flags: int = 0) -> None:
        assert not self.done.is_set(), "a response after the final one"
        self.sent.append((response, flags))
        if flags & FINAL:
            self.done.set()
        if self.after_send:
            self.after_send(self)

    def is_cancelled(self) -> bool:
        return self.cancelled

    def texts(self) -> list[str]:
        return [
            pb_utils.get_output_tensor_by_name(r, "text_output").as_numpy()[0].decode()
            for r, _ in self.sent
            if r is not None and not r.has_error()
        ]

    def output(self, name: str) -> Any:
        response = self.sent[-1][0]
        return pb_utils.get_output_tensor_by_name(response, name).as_numpy()[0]


class FakeRequest(pb_utils.InferenceRequest):
    def __init__(self, sender: FakeSender, **kwargs: Any):
        super().__init__(**kwargs)
        self._sender = sender

    def get_response_sender(self) -> FakeSender:
        return self._sender


def _request(prompt: str, parameters: dict | None = None, **inputs: Any) -> FakeRequest:
    tensors = [pb_utils.Tensor("text_input", np.array([prompt.encode()], dtype=np.object_))]
    for name, value in inputs.items():
        tensors.append(pb_utils.Tensor(name, np.array([value])))
    return FakeRequest(FakeSender(), inputs=tensors, request_id="r", parameters=parameters)


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    model = seeded_model()
    repository = tmp_path_factory.mktemp("tiny_gpt")
    checkpoint.save(model, VOCAB, repository / "1")
    return model, repository


@pytest.fixture
def served(model_files):
    model, repository = model_files

    class TritonPythonModel(GenerativeModel):
        pass

    TritonPythonModel.pb_utils = pb_utils
    instance = TritonPythonModel()
    instance.initialize(
        {
            "model_config": json.dumps(CONFIG),
            "model_repository": str(repository),
            "model_version": "1",
            "model_name": "tiny_gpt",
        }
    )
    yield instance, model
    instance.finalize()


def test_streaming_sends_one_response_per_token_and_a_final_flag(served) -> None:
    instance, model = served
    request = _request("The harbour", {"stream": True, "max_tokens": 12, "temperature": 0})
    assert instance.execute([request]) is None  # returns at once; the engine sends
    sender = request.get_response_sender()
    assert sender.done.wait(30)
    texts = sender.texts()
    assert len(texts) == 12
    assert "".join(texts) == VOCAB.decode(greedy_direct(model, "The harbour", 12))
    assert [flags for _, flags in sender.sent] == [0] * 11 + [FINAL]


def test_without_streaming_one_response_holds_prompt_and_text(served) -> None:
    instance, model = served
    request = _request(
        "A gull",
        max_tokens=np.int32(8),
        temperature=np.float32(0),
        return_finish_reason=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )
    instance.execute([request])
    sender = request.get_response_sender()
    assert sender.done.wait(30)
    assert len(sender.sent) == 1 and sender.sent[0][1] == FINAL
    assert sender.texts() == ["A gull" + VOCAB.decode(greedy_direct(model, "A gull", 8))]
    assert sender.output("finish_reason") == b"length"
    assert sender.output("num_input_tokens") == 6
    assert sender.output("num_output_tokens") == 8


def test_streamed_token_counts_add_up_when_a_stop_string_holds_text_back(served) -> None:
    instance, model = served
    reference = VOCAB.decode(greedy_direct(model, "The harbour", 40))
    stop = reference[20:23]
    parameters = {
        "stream": True,
        "max_tokens": 40,
        "temperature": 0,
        "stop": stop,
        "return_num_output_tokens": True,
        "return_finish_reason": True,
    }
    request = _request("The harbour", parameters)
    instance.execute([request])
    sender = request.get_response_sender()
    assert sender.done.wait(30)
    counts = [
        int(pb_utils.get_output_tensor_by_name(r, "num_output_tokens").as_numpy()[0])
        for r, _ in sender.sent
    ]
    end = reference.find(stop)
    assert "".join(sender.texts()) == reference[:end]
    assert sum(counts) == end + len(stop)  # every generated token, the stop string's included
    assert sender.output("finish_reason") == b"stop"


def test_sampling_parameters_json_and_inputs_override_request_parameters(served) -> None:
    instance, model = served
    request = _request(
        "x",
        {"max_tokens": 50, "temperature": 1.5},
        sampling_parameters=json.dumps({"temperature": 0, "max_tokens": 40}),
        max_tokens=np.int32(3),
        exclude_input_in_output=True,
    )
    instance.execute([request])
    sender = request.get_response_sender()
    assert sender.done.wait(30)
    assert sender.texts() == [VOCAB.decode(greedy_direct(model, "x", 3))]


def test_a_cancelled_request_stops_and_is_closed_with_a_final_flag(served) -> None:
    instance, _ = served

    def cancel_after_three(sender: FakeSender) -> None:
        if len(sender.sent) == 3:
            sender.cancelled = True

    request = _request("The", {"stream": True, "max_tokens": 120, "temperature": 0})
    sender = request.get_response_sender()
    sender.after_send = cancel_after_three
    instance.execute([request])
    assert sender.done.wait(30)
    assert sender.sent[-1] == (None, FINAL)  # flags-only final
    assert len(sender.sent) <= 5  # the token of the step in flight at most, then the final
    engine = instance.engine
    assert until_sync(lambda: engine.running == 0, 100 * 0.01, every=0.01), engine.running
    families = {f["name"]: f for f in pb_metrics.snapshot(0)[1]}
    assert "conch_generation_cancelled_total" in families


def test_a_request_cancelled_while_waiting_is_never_generated(served) -> None:
    instance, _ = served
    sender_requests = [
        _request("a", {"stream": True, "max_tokens": 60, "temperature": 0}) for _ in range(5)
    ]
    waiting = sender_requests[-1].get_response_sender()
    waiting.cancelled = True  # five requests, four slots: the last one waits
    instance.execute(sender_requests)
    for request in sender_requests:
        assert request.get_response_sender().done.wait(30)
    assert waiting.sent == [(None, FINAL)]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"max_tokens": 0}, "'max_tokens' must be at least 1"),
        ({"temperature": "hot"}, "'temperature' must be a number"),
        ({"stream": "maybe"}, "'stream' must be a boolean"),
    ],
)
def test_bad_parameters_are_answered_with_an_error_and_final(served, parameters, message) -> None:
    instance, _ = served
    request = _request("x", parameters)
    instance.execute([request])
    sender = request.get_response_sender()
    assert sender.done.is_set()
    response, flags = sender.sent[0]
    assert flags == FINAL and response.error().code() == pb_utils.TritonError.INVALID_ARG
    assert message in response.error().message()


def test_a_request_without_text_input_names_it(served) -> None:
    instance, _ = served
    request = FakeRequest(FakeSender(), inputs=[], request_id="r")
    instance.execute([request])
    response, _ = request.get_response_sender().sent[0]
    assert "'text_input' is required" in response.error().message()


def test_a_model_that_is_not_decoupled_is_refused_at_load(model_files) -> None:
    _, repository = model_files

    class TritonPythonModel(GenerativeModel):
        pass

    TritonPythonModel.pb_utils = pb_utils
    with pytest.raises(pb_utils.TritonModelException, match="decoupled: true"):
        TritonPythonModel().initialize(
            {
                "model_config": json.dumps({"name": "g"}),
                "model_repository": str(repository),
                "model_version": "1",
                "model_name": "g",
            }
        )


def test_engine_settings_come_from_config_parameters() -> None:
    settings = engine_settings(
        {"parameters": {"batching": {"string_value": "static"}, "token_budget": "64"}}
    )
    assert settings == {
        "batching": "static",
        "max_sequences": 32,
        "token_budget": 64,
        "static_batch_size": 1,
    }
    with pytest.raises(ValueError, match="'max_sequences' must be an integer"):
        engine_settings({"parameters": {"max_sequences": {"string_value": "many"}}})

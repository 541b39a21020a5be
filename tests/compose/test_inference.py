"""Requests through Envoy's published port, with the clients users run: tritonclient and openai."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from tests.compose.conftest import ADMIN_TOKEN, http_json, running_sums


def test_the_readme_example_answers_through_envoy(http_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    stats = client.get_inference_statistics("simple")["model_stats"][0]
    assert int(stats["inference_count"]) >= 1


def test_a_binary_request_and_binary_outputs(http_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    x = np.random.default_rng(0).random((4, 16), dtype=np.float32)
    y = np.ones((4, 16), dtype=np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [4, 16], "FP32"),
        httpclient.InferInput("INPUT1", [4, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(x, binary_data=True)
    inputs[1].set_data_from_numpy(y, binary_data=True)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), x + y, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), x - y, rtol=1e-6)


def test_the_repository_and_metadata_apis(http_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    assert client.is_server_live() and client.is_server_ready()
    assert ADMIN_TOKEN, "make compose-test sets CONCH_ADMIN_TOKEN: the repository API needs it"
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    index = {m["name"]: m for m in client.get_model_repository_index(headers=headers)}
    for name in (
        "simple",
        "add_sub",
        "mlp_ensemble",
        "simple_sequence",
        "repeat_int32",
        "tiny_gpt",
    ):
        assert index[name].get("state") == "READY", index.get(name)
    assert client.get_model_metadata("simple")["platform"] == "onnxruntime_onnx"
    assert client.get_model_config("simple_sequence")["sequence_batching"]


def test_an_ensemble_runs_through_the_schedulers(http_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    x = np.random.default_rng(1).random((2, 256), dtype=np.float32)
    inp = httpclient.InferInput("INPUT", [2, 256], "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    result = client.infer("mlp_ensemble", [inp])
    assert result.as_numpy("SCORES").shape == (2, 16)
    assert result.as_numpy("DELTA").shape == (2, 16)


def test_a_sequence_keeps_its_state(http_url: str) -> None:
    values = [3, 5, 7, 11]
    outs = running_sums(httpclient.InferenceServerClient(http_url), httpclient, values, 4242)
    # sequence_accumulator keeps its sum in implicit state: each answer is the running sum.
    assert outs == list(np.cumsum(values)), outs


def test_a_decoupled_model_streams_over_generate_stream(http_url: str) -> None:
    # square_int32 (Triton's decoupled example): IN = n gives n responses, each OUT = n.
    body = {"IN": 3}
    request = urllib.request.Request(
        f"http://{http_url}/v2/models/square_int32/generate_stream",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    events = []
    with urllib.request.urlopen(request, timeout=30) as response:
        for line in response:
            if line.startswith(b"data:"):
                events.append(json.loads(line[5:]))
    assert [e["OUT"] for e in events] == [3, 3, 3], events


def test_the_openai_client_streams_from_the_tiny_gpt(http_url: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"http://{http_url}/v1", api_key="unused", max_retries=0)
    assert "tiny_gpt" in [m.id for m in client.models.list().data]
    completion = client.completions.create(
        model="tiny_gpt", prompt="The harbour", max_tokens=8, temperature=0
    )
    chunks = client.completions.create(
        model="tiny_gpt", prompt="The harbour", max_tokens=8, temperature=0, stream=True
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == completion.choices[0].text
    assert completion.usage.completion_tokens == 8


def test_statistics_count_what_was_sent(http_url: str) -> None:
    before = http_json(f"http://{http_url}/v2/models/add_sub/stats")["model_stats"][0]
    client = httpclient.InferenceServerClient(http_url)
    x = np.zeros((1, 16), dtype=np.float32)
    for _ in range(5):
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "FP32"),
            httpclient.InferInput("INPUT1", [1, 16], "FP32"),
        ]
        for i in inputs:
            i.set_data_from_numpy(x)
        client.infer("add_sub", inputs)
    after = http_json(f"http://{http_url}/v2/models/add_sub/stats")["model_stats"][0]
    assert int(after["inference_count"]) - int(before["inference_count"]) >= 5
    assert int(after["execution_count"]) > int(before["execution_count"])

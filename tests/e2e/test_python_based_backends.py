"""Python-based backends through real processes: a repository written for them (configs that
name only the backend, version directories with only ``model.json``) loads unchanged when the
python worker is given the backend directory, answers tritonclient HTTP and gRPC with what the
backend's own function computes (batched by the dynamic batcher, and unbatched), streams the
decoupled ``tiny_llm`` backend over gRPC token for token as the model run in process does, fails
a backend found nowhere with the places looked in, and starts with ``conch up
--backend-directory``."""

from __future__ import annotations

import importlib.util
import queue
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import ConchUpOutput, Mesh, flush_database, start_conch_up, stop_conch_up
from tests.waiting import until_sync
from workers.python.stub import UTILS_DIR

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "make_python_backend_models.py"
EXAMPLE_BACKENDS = ROOT / "examples" / "backends"
TEXTS = [b"the cat saw The cat", b"one", b"a b c d e f", b"  spaced   out  ", b"x,y, z"]
PROMPT = "The harbour "
TOKENS = 16


def _has_torch() -> bool:
    return importlib.util.find_spec("torch") is not None


def _wordcount_module() -> ModuleType:
    """The backend's model.py in process (its count_words is what the mesh must answer)."""
    if UTILS_DIR not in sys.path:
        sys.path.insert(0, UTILS_DIR)
    spec = importlib.util.spec_from_file_location(
        "wordcount_backend", EXAMPLE_BACKENDS / "wordcount" / "model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(repository, backend directory, an empty directory searched first)."""
    root = tmp_path_factory.mktemp("python_based")
    repo, backends, empty = root / "repo", root / "backends", root / "empty"
    empty.mkdir()
    shutil.copytree(EXAMPLE_BACKENDS, backends)  # as a user installs a backend: copied there
    argv = [sys.executable, str(SCRIPT), str(repo)]
    if not _has_torch():
        argv.append("--skip-tiny-llm")
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    (repo / "mystery" / "1").mkdir(parents=True)
    (repo / "mystery" / "config.pbtxt").write_text('backend: "nowhere"\nmax_batch_size: 4\n')
    return repo, backends, empty


@pytest.fixture(scope="module")
def mesh(
    redis_server: PrivateRedis,
    layout: tuple[Path, Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Mesh, int]]:
    repo, backends, empty = layout
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("logs"))
    grpc_port = free_port()
    models = ["wordcount", "wordcount_csv"] + (["tiny_llm"] if _has_torch() else [])
    try:
        mesh.start_scheduler()
        mesh.start_worker(backend="python", CONCH_WORKER_BACKEND_DIRECTORY=f"{empty},{backends}")
        mesh.start_gateway(
            CONCH_GATEWAY_GRPC_PORT=str(grpc_port), CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false"
        )
        mesh.wait_ready(models, timeout_s=180)
        yield mesh, grpc_port
    finally:
        mesh.stop()


def _http_infer(url: str, model: str, texts: list[bytes], batched: bool) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(url)
    data = np.array(texts, dtype=np.object_).reshape((len(texts), 1) if batched else (1,))
    text = httpclient.InferInput("TEXT", list(data.shape), "BYTES")
    text.set_data_from_numpy(data)
    result = client.infer(model, [text])
    return {name: result.as_numpy(name) for name in ("COUNT", "UNIQUE")}


def _grpc_infer(port: int, model: str, texts: list[bytes], batched: bool) -> dict[str, Any]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    data = np.array(texts, dtype=np.object_).reshape((len(texts), 1) if batched else (1,))
    text = grpcclient.InferInput("TEXT", list(data.shape), "BYTES")
    text.set_data_from_numpy(data)
    result = client.infer(model, [text])
    client.close()
    return {name: result.as_numpy(name) for name in ("COUNT", "UNIQUE")}


def test_the_configuration_is_completed_by_the_backend(mesh: tuple[Mesh, int]) -> None:
    running, _ = mesh
    config = httpx.get(f"http://{running.url}/v2/models/wordcount/config", timeout=5).json()
    assert config["backend"] == "wordcount"
    assert [t["name"] for t in config["input"]] == ["TEXT"]
    assert [t["name"] for t in config["output"]] == ["COUNT", "UNIQUE"]
    assert config["max_batch_size"] == 64


def test_batched_wordcount_answers_http_and_grpc_as_the_backend_computes(
    mesh: tuple[Mesh, int],
) -> None:
    running, grpc_port = mesh
    counts, unique = _wordcount_module().count_words(TEXTS, None, True, 1)
    for answer in (
        _http_infer(running.url, "wordcount", TEXTS, True),
        _grpc_infer(grpc_port, "wordcount", TEXTS, True),
    ):
        np.testing.assert_array_equal(answer["COUNT"], counts.reshape(-1, 1))
        np.testing.assert_array_equal(answer["UNIQUE"], unique.reshape(-1, 1))
    assert counts.tolist() == [5, 1, 6, 2, 2] and unique.tolist() == [3, 1, 6, 2, 2]


def test_the_dynamic_batcher_forms_batches_of_several_requests(mesh: tuple[Mesh, int]) -> None:
    running, _ = mesh
    module = _wordcount_module()
    texts = [f"word {'x ' * i}".encode() for i in range(48)]

    def one(text: bytes) -> int:
        return int(_http_infer(running.url, "wordcount", [text], True)["COUNT"][0, 0])

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(one, texts))
    assert got == module.count_words(texts)[0].tolist()
    client = httpclient.InferenceServerClient(running.url)
    stats = client.get_inference_statistics("wordcount")["model_stats"][0]
    sizes = [int(b["batch_size"]) for b in stats["batch_stats"]]
    assert max(sizes) > 1, f"no batch of more than one request executed: {sizes}"


def test_the_same_backend_serves_an_unbatched_model_with_its_own_data(
    mesh: tuple[Mesh, int],
) -> None:
    running, grpc_port = mesh
    module = _wordcount_module()
    for text in (b"a,b,,c", b"one two, three"):
        counts, unique = module.count_words([text], ",", True, 1)
        for answer in (
            _http_infer(running.url, "wordcount_csv", [text], False),
            _grpc_infer(grpc_port, "wordcount_csv", [text], False),
        ):
            assert answer["COUNT"].shape == (1,)
            np.testing.assert_array_equal(answer["COUNT"], counts)
            np.testing.assert_array_equal(answer["UNIQUE"], unique)


def test_a_backend_found_nowhere_fails_its_load_naming_where_it_looked(
    mesh: tuple[Mesh, int], layout: tuple[Path, Path, Path]
) -> None:
    running, _ = mesh
    _, backends, empty = layout

    def reason() -> str:
        entries = httpx.post(f"http://{running.url}/v2/repository/index", json={}, timeout=5)
        found = [e for e in entries.json() if e["name"] == "mystery"]
        return str(found[0].get("reason", "")) if found else ""

    until_sync(lambda: "unable to find" in reason(), 30, every=0.2)
    said = reason()
    assert "unable to find backend library for backend 'nowhere'" in said
    assert str(empty / "nowhere" / "model.py") in said
    assert str(backends / "nowhere" / "model.py") in said


def _greedy(repo: Path, prompt: str, tokens: int) -> str:
    import torch

    from workers.generative import checkpoint

    model, vocab = checkpoint.load(repo / "tiny_llm" / "1")
    ids = vocab.encode(prompt)
    out = []
    with torch.no_grad():
        for _ in range(tokens):
            token = int(model(torch.tensor([ids]))[0, -1].argmax())
            ids.append(token)
            out.append(token)
    return vocab.decode(out)


def test_tiny_llm_streams_over_grpc_token_for_token(
    mesh: tuple[Mesh, int], layout: tuple[Path, Path, Path]
) -> None:
    if not _has_torch():
        pytest.skip("torch is not installed: the tiny_llm example model was not written")
    running, grpc_port = mesh
    repo = layout[0]
    config = httpx.get(f"http://{running.url}/v2/models/tiny_llm/config", timeout=5).json()
    assert config["model_transaction_policy"]["decoupled"] is True  # from auto_complete_config
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=np.object_))
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    pieces: list[str] = []
    try:
        client.async_stream_infer(
            "tiny_llm",
            [text],
            parameters={"stream": True, "max_tokens": TOKENS, "temperature": 0},
            enable_empty_final_response=True,
        )
        while True:
            result, error = results.get(timeout=60)
            assert error is None, error
            output = result.as_numpy("text_output")
            if output is not None:
                pieces.extend(item.decode() for item in output)
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
        client.close()
    expected = _greedy(repo, PROMPT, TOKENS)
    assert len(pieces) == TOKENS
    assert "".join(pieces) == expected
    body = {"text_input": PROMPT, "parameters": {"max_tokens": TOKENS, "temperature": 0}}
    whole = httpx.post(f"http://{running.url}/v2/models/tiny_llm/generate", json=body, timeout=60)
    assert whole.status_code == 200, whole.text
    assert whole.json()["text_output"] == PROMPT + expected


def test_conch_up_with_the_backend_directory_serves_the_repository(tmp_path: Path) -> None:
    # A backend only the flag's directory has (examples/backends is searched by default).
    repo, backends = tmp_path / "repo", tmp_path / "my_backends"
    shutil.copytree(EXAMPLE_BACKENDS / "wordcount", backends / "textstats")
    subprocess.run(
        [sys.executable, str(SCRIPT), str(repo), "--skip-tiny-llm"],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    for name in ("wordcount", "wordcount_csv"):
        config = repo / name / "config.pbtxt"
        config.write_text(
            config.read_text().replace('backend: "wordcount"', 'backend: "textstats"')
        )
    assert 'backend: "textstats"' in (repo / "wordcount" / "config.pbtxt").read_text()
    port = free_port()
    process = start_conch_up(
        repo, "--http-port", str(port), "--backend-directory", str(backends), "--gateways", "1"
    )
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 180)
        answer = _http_infer(f"localhost:{port}", "wordcount", TEXTS[:2], True)
        np.testing.assert_array_equal(answer["COUNT"], [[5], [1]])
    finally:
        stop_conch_up(process)
    assert process.returncode == 0

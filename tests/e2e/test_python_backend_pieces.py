"""The Python backend's pieces a Triton user relies on, through real clients against a mesh in
explicit model control mode (one scheduler, a Python worker, one gateway):

- ``InferenceResponse(parameters=...)`` reach the client: HTTP's response ``parameters``, gRPC's
  ``ModelInferResponse.parameters`` with their types (bool, int64, string), a decoupled model's
  on each streamed response; other value types fail the request with Triton's words.
- ``EXECUTION_ENV_PATH``: a model imports a package only its packed environment (a venv archive
  the test builds) holds; an environment of another Python version is refused at load, naming
  both versions.
- BLS with ``correlation_id`` and START/END ``flags`` reaches a sequence model's sequence batcher:
  the accumulator's sums run across a sequence's steps and restart at START.
- ``pb_utils.load_model`` / ``unload_model`` / ``is_model_ready`` act on the fleet.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.waiting import until_sync

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"

IDENTITY_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
{extra}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: {out_type} dims: [ -1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

PARAMS_MODEL = """\
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            asked = json.loads(request.parameters() or "{}")
            parameters = {"note": "hello", "count": 7, "flag": True}
            if asked.get("bad"):
                parameters["ratio"] = 0.5  # Triton allows bool, int and str only
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)], parameters=parameters)
            )
        return responses
"""

STREAM_PARAMS_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for index in range(2):
                out = pb_utils.Tensor("OUT", value + index)
                sender.send(pb_utils.InferenceResponse([out], parameters={"index": index}))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

ENV_MODEL = """\
import numpy as np
import conch_probe_pkg
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        value = np.array([conch_probe_pkg.VALUE.encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]) for _ in requests]
"""

BLS_SEQUENCE_MODEL = """\
import json
import numpy as np
import triton_python_backend_utils as pb_utils

START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
END = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().tolist()
            corrid = json.loads(request.parameters() or "{}").get("corrid", 0)
            sums = []
            for i, value in enumerate(values):
                flags = (START if i == 0 else 0) | (END if i == len(values) - 1 else 0)
                step = pb_utils.InferenceRequest(
                    model_name="sequence_accumulator_py",
                    inputs=[pb_utils.Tensor("INPUT", np.array([[value]], np.int32))],
                    requested_output_names=["OUTPUT"],
                    correlation_id=corrid,
                    flags=flags,
                ).exec()
                if step.has_error():
                    raise pb_utils.TritonModelException(step.error().message())
                output = pb_utils.get_output_tensor_by_name(step, "OUTPUT").as_numpy()
                sums.append(int(output.reshape(-1)[0]))
            out = pb_utils.Tensor("OUT", np.array(sums, np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

CONTROL_MODEL = """\
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            asked = json.loads(request.parameters() or "{}")
            target, action = asked["target"], asked["action"]
            if action == "load":
                pb_utils.load_model(target)
            elif action == "load_config":
                pb_utils.load_model(target, config=asked["config"])
            elif action == "unload":
                pb_utils.unload_model(target)
            ready = pb_utils.is_model_ready(target)
            out = pb_utils.Tensor("OUT", np.array([int(ready)], np.int32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

TARGET_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)]
            )
            for r in requests
        ]
"""

ENV_PARAMETER = (
    'parameters { key: "EXECUTION_ENV_PATH" '
    'value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
)


def _model(
    repo: Path, name: str, source: str, out_type: str = "TYPE_INT32", extra: str = ""
) -> Path:
    directory = repo / name
    (directory / "1").mkdir(parents=True)
    (directory / "1" / "model.py").write_text(source)
    (directory / "config.pbtxt").write_text(
        IDENTITY_CONFIG.format(name=name, extra=extra, out_type=out_type)
    )
    return directory


def _packed_env(work: Path, archive: Path, python_dir: str) -> None:
    """A venv (no pip) holding ``conch_probe_pkg``, which the worker's environment lacks, packed
    from its root as conda-pack packs."""
    env = work / f"env-{python_dir}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = env / "lib" / python_dir / "site-packages"
    if python_dir != PY:  # another interpreter's layout
        (env / "lib" / PY).rename(env / "lib" / python_dir)
    package = site / "conch_probe_pkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('VALUE = "from the packed environment"\n')
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env, arcname=".")


@pytest.fixture(scope="module")
def pb_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, str]]:
    repo = tmp_path_factory.mktemp("pb_repo")
    work = tmp_path_factory.mktemp("pb_envs")
    maker = str(ROOT / "examples" / "make_backend_models.py")
    subprocess.run(
        [sys.executable, maker, str(repo), "--model", "sequence_accumulator_py"],
        check=True,
        capture_output=True,
    )
    _model(repo, "pb_params", PARAMS_MODEL)
    decoupled = "model_transaction_policy { decoupled: true }"
    _model(repo, "pb_stream_params", STREAM_PARAMS_MODEL, extra=decoupled)
    env_model = _model(repo, "pb_env", ENV_MODEL, "TYPE_STRING", ENV_PARAMETER)
    _packed_env(work, env_model / "env.tar.gz", PY)
    old_model = _model(repo, "pb_env_old", ENV_MODEL, "TYPE_STRING", ENV_PARAMETER)
    _packed_env(work, old_model / "env.tar.gz", "python3.9")
    _model(repo, "bls_seq", BLS_SEQUENCE_MODEL)
    _model(repo, "pb_control", CONTROL_MODEL)
    _model(repo, "pb_target", TARGET_MODEL)
    flush_database(redis_server.url)
    grpc_port = free_port()
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path_factory.mktemp("pb_logs"))
    started = ["pb_params", "pb_stream_params", "pb_env", "bls_seq", "pb_control"]
    started.append("sequence_accumulator_py")
    try:
        mesh.start_scheduler()
        mesh.start_worker("worker-py", backend="python", CONCH_WORKER_LOAD_MODELS=",".join(started))
        mesh.start_gateway(
            1,
            CONCH_GATEWAY_GRPC_PORT=str(grpc_port),
            CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false",
        )
        mesh.wait_ready(started, timeout_s=180)
        yield mesh, f"127.0.0.1:{grpc_port}"
    finally:
        mesh.stop()


def _http_in(values: list[int], name: str = "IN") -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput(name, [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, np.int32))
    return [tensor]


def test_response_parameters_reach_http_and_grpc_clients(pb_mesh: tuple[Mesh, str]) -> None:
    mesh, grpc_url = pb_mesh
    http = httpclient.InferenceServerClient(mesh.url)
    result = http.infer("pb_params", _http_in([1, 2]))
    assert result.get_response()["parameters"] == {"note": "hello", "count": 7, "flag": True}
    assert result.as_numpy("OUT").tolist() == [1, 2]

    grpc = grpcclient.InferenceServerClient(grpc_url)
    tensor = grpcclient.InferInput("IN", [2], "INT32")
    tensor.set_data_from_numpy(np.array([3, 4], np.int32))
    parameters = grpc.infer("pb_params", [tensor]).get_response().parameters
    assert parameters["note"].string_param == "hello"
    assert parameters["count"].int64_param == 7
    assert parameters["flag"].bool_param is True

    with pytest.raises(InferenceServerException, match="bool/int/str, found type float"):
        http.infer("pb_params", _http_in([1]), parameters={"bad": True})


def test_a_decoupled_models_response_parameters_reach_a_grpc_stream(
    pb_mesh: tuple[Mesh, str],
) -> None:
    _, grpc_url = pb_mesh
    received: queue.Queue[object] = queue.Queue()
    grpc = grpcclient.InferenceServerClient(grpc_url)
    grpc.start_stream(callback=lambda result, error: received.put(error or result))
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([5], np.int32))
        grpc.async_stream_infer("pb_stream_params", [tensor])
        seen = []
        for _ in range(2):
            result = received.get(timeout=20)
            assert isinstance(result, grpcclient.InferResult), result
            index = result.get_response().parameters["index"].int64_param
            seen.append((index, result.as_numpy("OUT").tolist()))
        assert seen == [(0, [5]), (1, [6])]
    finally:
        grpc.stop_stream()


def test_a_model_runs_with_its_packed_environment(pb_mesh: tuple[Mesh, str]) -> None:
    mesh, _ = pb_mesh
    http = httpclient.InferenceServerClient(mesh.url)
    result = http.infer("pb_env", _http_in([0]))
    assert result.as_numpy("OUT").tolist() == [b"from the packed environment"]
    with pytest.raises(InferenceServerException) as refused:
        http.load_model("pb_env_old")
    message = str(refused.value)
    assert "EXECUTION_ENV_PATH" in message and "Python 3.9" in message, message
    assert f"Python {PY[len('python') :]}" in message, message


def test_bls_steps_of_a_sequence_carry_correlation_id_and_flags(
    pb_mesh: tuple[Mesh, str],
) -> None:
    mesh, _ = pb_mesh
    http = httpclient.InferenceServerClient(mesh.url)
    sums = http.infer("bls_seq", _http_in([1, 2, 3]), parameters={"corrid": 41})
    assert sums.as_numpy("OUT").tolist() == [1, 3, 6]
    # START again on the same id: the sum restarts; another id, a string one, its own sum.
    assert http.infer("bls_seq", _http_in([10, 5]), parameters={"corrid": 41}).as_numpy(
        "OUT"
    ).tolist() == [10, 15]
    assert http.infer("bls_seq", _http_in([4, 4]), parameters={"corrid": "s-9"}).as_numpy(
        "OUT"
    ).tolist() == [4, 8]
    with pytest.raises(InferenceServerException, match="correlation ID"):
        http.infer("bls_seq", _http_in([1]))


def test_a_python_model_loads_and_unloads_models(pb_mesh: tuple[Mesh, str]) -> None:
    mesh, _ = pb_mesh
    http = httpclient.InferenceServerClient(mesh.url)
    assert not http.is_model_ready("pb_target")

    def control(action: str, **more: object) -> int:
        parameters = {"action": action, "target": "pb_target", **more}
        return int(
            http.infer("pb_control", _http_in([0]), parameters=parameters).as_numpy("OUT")[0]
        )

    assert control("ready") == 0
    assert control("load") == 1  # pb_utils.is_model_ready right after load_model
    assert until_sync(lambda: http.is_model_ready("pb_target"), 10)  # the gateway hears it
    assert http.infer("pb_target", _http_in([5])).as_numpy("OUT").tolist() == [10]
    assert control("unload") == 0
    assert until_sync(lambda: not http.is_model_ready("pb_target"), 10)
    with pytest.raises(InferenceServerException, match="cannot unload itself"):
        http.infer(
            "pb_control", _http_in([0]), parameters={"action": "unload", "target": "pb_control"}
        )
    with pytest.raises(InferenceServerException, match="Invalid config override"):
        control("load_config", config='["not", "an", "object"]')

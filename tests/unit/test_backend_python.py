"""The Python backend: Triton models run unchanged, one process per instance, failures contained.

Real processes throughout (spawned model processes, real pipes, real ``os._exit``); the example
models come from ``examples/make_backend_models.py``. Concurrency is proven without timing: the
probe model's rendezvous only completes when two executions are inside ``execute`` at once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import psutil
import pytest

from shared.model_config import InstanceGroup, parse_pbtxt
from shared.storage.repository import RepositoryModel, read_model
from shared.wire.errors import ConchError, ErrorCode
from tests.waiting import until_sync
from workers.backend import LoadSpec, ModelInstance, ModelRequest
from workers.loading.warmup import run_warmup
from workers.python.backend import PythonBackend, PythonModelInstance

ROOT = Path(__file__).resolve().parents[2]
UTILS_DIR = ROOT / "workers" / "python"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("python_repo")
    spec = importlib.util.spec_from_file_location(
        "mbm", ROOT / "examples" / "make_backend_models.py"
    )
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.write_repository(root, ["tokenizer", "python_probe"])
    return root


@pytest.fixture
def instances() -> Iterator[list[ModelInstance]]:
    """Instances loaded by a test, unloaded (finalize, process gone) afterwards."""
    loaded: list[ModelInstance] = []
    yield loaded
    for instance in loaded:
        instance.unload()


def load(model: RepositoryModel, instances: list[ModelInstance], index: int = 0) -> ModelInstance:
    group = model.config.instance_groups[0]
    instance = PythonBackend().load(
        LoadSpec(model.config, 1, model.version_path(1), model.path, group, index)
    )
    instances.append(instance)
    return instance


def probe(value: int, parameters: dict[str, object] | None = None) -> ModelRequest:
    return ModelRequest(
        id=f"v{value}",
        inputs={"INPUT0": np.array([[value]], dtype=np.int64)},
        requested_outputs=["OUTPUT0", "PID"],
        parameters=parameters or {},
    )


def text_request(texts: list[str]) -> ModelRequest:
    array = np.empty((len(texts), 1), dtype=object)
    array[:, 0] = [t.encode() for t in texts]
    return ModelRequest(
        id="t", inputs={"TEXT": array}, requested_outputs=["TOKEN_IDS", "NORMALIZED"]
    )


def run_in_process(model_dir: Path, config_json: dict[str, object], texts: list[str]) -> dict:
    """The Triton model called directly, in this process, as Triton's stub would call it."""
    sys.path.insert(0, str(UTILS_DIR))
    try:
        import triton_python_backend_utils as pb_utils

        spec = importlib.util.spec_from_file_location("tok_direct", model_dir / "1" / "model.py")
        assert spec and spec.loader
        module: ModuleType = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(UTILS_DIR))
    model = module.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config_json)})
    array = np.array([[t.encode()] for t in texts], dtype=object)
    request = pb_utils.InferenceRequest(
        "tokenizer", ["TOKEN_IDS"], [pb_utils.Tensor("TEXT", array)]
    )
    (response,) = model.execute([request])
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def test_tokenizer_runs_unchanged_and_matches_direct_call(
    repo: Path, instances: list[ModelInstance]
) -> None:
    model = read_model(repo / "tokenizer")
    instance = load(model, instances)
    batch = [text_request(["Hello, World!", "naïve café"]), text_request(["one"])]
    execution = instance.execute(batch)
    assert [r.error for r in execution.results] == [None, None]
    first = execution.results[0].outputs
    assert first["TOKEN_IDS"].shape == (2, 16) and first["TOKEN_IDS"].dtype == np.int64
    assert first["NORMALIZED"].dtype == object
    assert first["NORMALIZED"][:, 0].tolist() == [b"hello , world !", "naïve café".encode()]
    direct = run_in_process(model.path, model.config.to_json(), ["Hello, World!", "naïve café"])
    np.testing.assert_array_equal(first["TOKEN_IDS"], direct["TOKEN_IDS"])
    np.testing.assert_array_equal(first["NORMALIZED"], direct["NORMALIZED"])
    assert execution.results[1].outputs["TOKEN_IDS"][0, :2].tolist()[0] == 101


def test_tokenizer_warmup_reads_bytes_file(repo: Path, instances: list[ModelInstance]) -> None:
    model = read_model(repo / "tokenizer")
    assert run_warmup(load(model, instances), model.config, model.version_path(1)) == 1


def test_exception_and_error_response_fail_only_their_request(
    repo: Path, instances: list[ModelInstance]
) -> None:
    instance = load(read_model(repo / "python_probe"), instances)
    results = instance.execute([probe(3), probe(-1), probe(-2), probe(5)]).results
    assert results[0].error is None and results[0].outputs["OUTPUT0"].tolist() == [[6]]
    assert results[1].error is not None and results[1].error.code == ErrorCode.INTERNAL
    assert "ValueError" in results[1].error.message and "-1" in results[1].error.message
    assert results[2].error is not None and results[2].error.code == ErrorCode.INVALID_ARG
    assert results[3].error is None and results[3].outputs["OUTPUT0"].tolist() == [[10]]


def test_crash_fails_the_batch_and_the_instance_restarts(
    repo: Path, instances: list[ModelInstance]
) -> None:
    instance = load(read_model(repo / "python_probe"), instances)
    assert isinstance(instance, PythonModelInstance)
    old_pid = instance.pid
    results = instance.execute([probe(1), probe(-9)]).results
    for result in results:
        assert result.error is not None and result.error.code == ErrorCode.UNAVAILABLE
        assert "exited with code 17" in result.error.message
    (after,) = instance.execute([probe(4)]).results  # waits for the restart, then runs
    assert after.error is None and after.outputs["OUTPUT0"].tolist() == [[8]]
    assert after.outputs["PID"][0, 0] == instance.pid != old_pid
    assert instance.restarts == 1


def test_two_instances_execute_at_the_same_time(
    repo: Path, instances: list[ModelInstance], tmp_path: Path
) -> None:
    model = read_model(repo / "python_probe")
    assert model.config.instance_groups[0].count == 2
    pair = [load(model, instances, index) for index in range(2)]
    results: dict[int, np.ndarray] = {}
    parameters = {"rendezvous": str(tmp_path), "parties": 2}

    def drive(index: int) -> None:
        (result,) = pair[index].execute([probe(index, parameters)]).results
        assert result.error is None
        results[index] = result.outputs["PID"]

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pids = {int(results[i][0, 0]) for i in range(2)}
    # Positive pids: each execution saw the other inside execute (the rendezvous completed).
    assert all(pid > 0 for pid in pids) and len(pids) == 2
    assert pids == {p.pid for p in pair if isinstance(p, PythonModelInstance)}


def test_finalize_runs_on_unload(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONCH_PROBE_FINALIZE_DIR", str(tmp_path))
    instance = load(read_model(repo / "python_probe"), [])
    assert isinstance(instance, PythonModelInstance)
    process = instance._process
    assert process is not None
    instance.unload()
    assert [p.name for p in tmp_path.iterdir()] == [f"finalized-python_probe_0_0-{process.pid}"]
    assert not process.process.is_alive()
    (result,) = instance.execute([probe(1)]).results  # unloaded: a clear error, no restart
    assert result.error is not None and "unloaded" in result.error.message


CUSTOM_CONFIG = """
name: "custom" backend: "python" max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "ARGS" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { name: "grp" kind: KIND_CPU count: 1 } ]
"""

CUSTOM_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils
from helper import SUFFIX

class TritonPythonModel:
    {initialize}

    async def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out = np.array([x.decode() + SUFFIX for x in data])  # a str ("U") array
            args = np.array([json.dumps(self.args)], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", out), pb_utils.Tensor("ARGS", args)]))
        return responses
"""


def custom_model(tmp_path: Path, initialize: str) -> RepositoryModel:
    version = tmp_path / "custom" / "1"
    version.mkdir(parents=True)
    (tmp_path / "custom" / "config.pbtxt").write_text(CUSTOM_CONFIG)
    (version / "model.py").write_text(CUSTOM_MODEL.replace("{initialize}", initialize))
    (version / "helper.py").write_text('SUFFIX = "!"\n')
    return read_model(tmp_path / "custom")


def test_args_strings_and_async_execute(tmp_path: Path, instances: list[ModelInstance]) -> None:
    model = custom_model(tmp_path, "def initialize(self, args):\n        self.args = args")
    instance = load(model, instances)
    request = ModelRequest(
        "x", {"IN": np.array([b"h\xc3\xa9", b""], dtype=object)}, ["OUT", "ARGS"]
    )
    (result,) = instance.execute([request]).results
    assert result.error is None
    assert result.outputs["OUT"].tolist() == ["hé!".encode(), b"!"]
    args = json.loads(result.outputs["ARGS"][0])
    assert args == {
        "model_config": json.dumps(model.config.to_json()),
        "model_instance_kind": "CPU",
        "model_instance_name": "grp_0",
        "model_instance_device_id": "0",
        "model_repository": str(model.path),
        "model_version": "1",
        "model_name": "custom",
    }


def test_initialize_failure_is_reported(tmp_path: Path) -> None:
    model = custom_model(tmp_path, "def initialize(self, args):\n        raise RuntimeError('no')")
    with pytest.raises(ConchError) as caught:
        load(model, [])
    assert caught.value.code == ErrorCode.INTERNAL
    assert "failed to initialize: RuntimeError: no" in caught.value.message


def test_missing_model_file_is_not_found(tmp_path: Path) -> None:
    config = parse_pbtxt('name: "m" backend: "python" max_batch_size: 0')
    model = RepositoryModel("m", tmp_path, config, [1])
    group = InstanceGroup(name="m_0", kind="KIND_CPU", count=1)
    with pytest.raises(ConchError) as caught:
        PythonBackend().load(LoadSpec(config, 1, tmp_path / "1", tmp_path, group, 0))
    assert caught.value.code == ErrorCode.NOT_FOUND and "model.py" in caught.value.message
    assert model.name == "m"


def test_slow_start_is_bounded(tmp_path: Path) -> None:
    model = custom_model(
        tmp_path, "def initialize(self, args):\n        import time; time.sleep(30)"
    )
    group = model.config.instance_groups[0]
    spec = LoadSpec(model.config, 1, model.version_path(1), model.path, group, 0)
    started = time.monotonic()
    original = PythonModelInstance.start_timeout_s
    PythonModelInstance.start_timeout_s = 1.0
    try:
        with pytest.raises(ConchError, match="no answer to initialize within 1 s"):
            PythonModelInstance(spec)
    finally:
        PythonModelInstance.start_timeout_s = original
    assert time.monotonic() - started < 15


def test_sigterm_to_the_group_does_not_kill_the_model(
    repo: Path, instances: list[ModelInstance]
) -> None:
    """Supervisors signal the whole process group; finalize must still run at unload."""
    instance = load(read_model(repo / "python_probe"), instances)
    assert isinstance(instance, PythonModelInstance) and instance.pid
    os.kill(instance.pid, signal.SIGTERM)
    os.kill(instance.pid, signal.SIGINT)
    (result,) = instance.execute([probe(2)]).results
    assert result.error is None and instance.restarts == 0


WORKER = """
import sys, time
from shared.storage.repository import read_model
from workers.backend import LoadSpec
from workers.python.backend import PythonBackend
if __name__ == "__main__":
    model = read_model(__import__("pathlib").Path(sys.argv[1]))
    group = model.config.instance_groups[0]
    spec = LoadSpec(model.config, 1, model.version_path(1), model.path, group, 0)
    print(PythonBackend().load(spec).pid, flush=True)
    time.sleep(60)
"""


def test_model_process_exits_when_the_worker_is_killed(repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    worker = subprocess.Popen(
        [sys.executable, str(script), str(repo / "python_probe")],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert worker.stdout is not None
        model_pid = int(worker.stdout.readline())
        assert psutil.pid_exists(model_pid)
    finally:
        worker.kill()
        worker.wait()
    assert until_sync(lambda: not _running(model_pid), 10, every=0.1), "the model outlived it"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

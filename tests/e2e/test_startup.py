"""Start-up that tells the truth (issue 19): strict readiness across gateway processes, port
clashes refused, start-up failures loud and final."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import ConchUpOutput, Mesh, flush_database, start_conch_up, stop_conch_up
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e

LOAD_S = 4.0  # the slow model's initialize(): the window in which readiness must say no

SLOW_LOADING_MODEL = f"""
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({LOAD_S})

    def execute(self, requests):
        answers = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value * 2)]))
        return answers
"""

SLOW_LOADING_CONFIG = """
name: "slow_loading"
backend: "python"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""


def write_slow_loading_model(repo: Path) -> None:
    model = repo / "slow_loading"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(SLOW_LOADING_MODEL)
    (model / "config.pbtxt").write_text(SLOW_LOADING_CONFIG)


@pytest.fixture
def startup_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path: Path
) -> Iterator[Mesh]:
    repo = tmp_path / "repo"
    write_slow_loading_model(repo)
    (repo / "simple").symlink_to(model_repository / "simple")
    flush_database(redis_server.url)
    (tmp_path / "logs").mkdir()
    mesh = Mesh(redis_server.url, repo, log_dir=tmp_path / "logs")
    try:
        yield mesh
    finally:
        mesh.stop()


async def _fire(url: str, requests: int) -> Counter[str]:
    """``requests`` inferences on many connections at once (the kernel spreads new connections
    over the gateway's processes); outcome -> count ("ok", or the HTTP status of a failure)."""
    client = aiohttpclient.InferenceServerClient(url, conn_limit=64)

    async def one(value: int) -> str:
        tensor = aiohttpclient.InferInput("INPUT0", [1, 1], "INT64")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.int64))
        try:
            result = await client.infer("slow_loading", [tensor])
        except InferenceServerException as exc:
            return f"{exc.status()} {exc.message()}"
        return "ok" if int(result.as_numpy("OUTPUT0")[0, 0]) == 2 * value else "wrong answer"

    try:
        return Counter(await asyncio.gather(*(one(v) for v in range(requests))))
    finally:
        await client.close()


def test_ready_means_every_model_is_ready_in_every_gateway_process(startup_mesh: Mesh) -> None:
    """Gateways first (as Kubernetes may start them), then a worker whose model takes seconds to
    load: /v2/health/ready says why it is not ready until the model is, a request meanwhile is
    answered "not at ready state" (503), never "unknown" (404), and from the moment ready first
    answers 200 every request to any of the three gateway processes succeeds."""
    mesh = startup_mesh
    base = f"http://{mesh.url}"
    mesh.start_gateway(processes=3)
    mesh.start_scheduler()

    def first_answer() -> httpx.Response | None:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{base}/v2/health/ready", timeout=2)
        return None

    first = eventually_sync(first_answer, lambda found: found is not None, 60, every=0.1)
    assert first is not None, mesh.logs()
    assert first.status_code == 503
    assert "no worker has read the model repository yet" in first.json()["error"]

    mesh.start_worker("worker-python", backend="python")
    mesh.start_worker("worker-onnxruntime", backend="onnxruntime")
    loading: list[httpx.Response] = []

    def ready_now() -> httpx.Response:
        """/v2/health/ready; while it names slow_loading, a request to it (up to three)."""
        ready = httpx.get(f"{base}/v2/health/ready", timeout=2)
        if ready.status_code != 200 and "slow_loading" in ready.text and len(loading) < 3:
            loading.append(
                httpx.post(
                    f"{base}/v2/models/slow_loading/infer",
                    json={"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT64",
                                      "data": [1]}]},
                    timeout=10,
                )
            )  # fmt: skip
        return ready

    ready = eventually_sync(ready_now, lambda found: found.status_code == 200, 90)
    assert ready.status_code == 200, f"never ready: {ready.text}\n{mesh.logs()}"
    outcomes = asyncio.run(_fire(mesh.url, 400))
    assert outcomes == Counter({"ok": 400}), outcomes
    assert loading, "the model never showed as loading: nothing was tested"
    for answer in loading:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == (
            "Request for unknown model: 'slow_loading' version 1 is not at ready state"
        )


def test_a_load_that_fails_is_not_waited_for_and_says_why(startup_mesh: Mesh) -> None:
    """Triton's strict readiness: a model that failed to load does not hold the server back;
    it is answered 404 with the reason, and the repository index shows it."""
    mesh = startup_mesh
    broken = mesh.repository / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "model.py").write_text("import no_such_module_anywhere\n")
    (broken / "config.pbtxt").write_text(SLOW_LOADING_CONFIG.replace("slow_loading", "broken"))
    mesh.start_gateway(processes=2, CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false")
    mesh.start_scheduler()
    mesh.start_worker("worker-python", backend="python")
    mesh.start_worker("worker-onnxruntime", backend="onnxruntime")
    mesh.wait_ready(["simple", "slow_loading"], timeout_s=90)
    answer = httpx.post(f"http://{mesh.url}/v2/models/broken/infer", json={"inputs": []})
    assert answer.status_code == 404
    assert "no_such_module_anywhere" in answer.json()["error"]
    index = httpx.post(f"http://{mesh.url}/v2/repository/index", json={}).json()
    entry = next(e for e in index if e["name"] == "broken")
    assert entry["state"] == "UNAVAILABLE" and "no_such_module_anywhere" in entry["reason"]


def test_conch_up_http_port_on_the_grpc_default_fails_at_once(model_repository: Path) -> None:
    """`conch up --http-port 8001` while gRPC keeps its default 8001: refused before anything
    binds (the numbers clash; no port is touched), naming the port and both flags."""
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    argv = [sys.executable, "-m", "conch", "up", "--model-repository", str(model_repository)]
    done = subprocess.run(
        [*argv, "--http-port", "8001"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert "8001" in done.stderr and "--http-port" in done.stderr and "--grpc-port" in done.stderr


def test_conch_up_on_a_port_held_by_anything_else_fails_naming_the_holder(
    model_repository: Path,
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        process = start_conch_up(model_repository, "--http-port", str(port))
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 2, out
    assert f"port {port} (HTTP) is already in use by pid {os.getpid()}" in out
    assert "--http-port" in out


def test_a_second_conch_up_on_a_held_port_fails_and_the_first_serves_on(
    model_repository: Path,
) -> None:
    """Before issue 19 the second mesh joined the port (SO_REUSEPORT) and said it was ready,
    having asked the first one."""
    http_port, grpc_port = free_port(), free_port()
    first = start_conch_up(
        model_repository, "--http-port", str(http_port), "--grpc-port", str(grpc_port)
    )
    output = ConchUpOutput(first)
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{http_port}", 120)
        for args, flag, port in (
            (["--http-port", str(http_port)], "--http-port", http_port),
            (["--http-port", str(free_port()), "--grpc-port", str(grpc_port)], "--grpc-port",
             grpc_port),
        ):  # fmt: skip
            env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
            second = subprocess.run(
                [sys.executable, "-m", "conch", "up", "--model-repository",
                 str(model_repository), *args],
                capture_output=True, text=True, env=env, timeout=60,
            )  # fmt: skip
            assert second.returncode == 2, second.stdout + second.stderr
            said = second.stderr
            assert f"port {port}" in said and "already in use by pid" in said, said
            assert "-m gateway" in said and flag in said, said
            assert "Conch is ready" not in second.stdout
        assert httpx.get(f"http://127.0.0.1:{http_port}/v2/health/ready").status_code == 200
    finally:
        alive = stop_conch_up(first)
    assert not alive


SHADOW = 'raise ImportError("No module named {name!r} (stand-in: {name} is not installed)")\n'


def _shadowed(tmp_path: Path, module: str) -> dict[str, str]:
    """An environment where ``import <module>`` fails as it does where it is not installed."""
    shadow = tmp_path / "shadow" / module
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(SHADOW.format(name=module))
    return {
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])
    }


def _conch_up_log(tmp_path: Path, repo: Path, env: dict[str, str]) -> tuple[int, str, int]:
    """Run `conch up` to its end with its output in a file: exit code, output, size in bytes."""
    log = tmp_path / "conch-up.log"
    run_env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"} | env
    argv = [sys.executable, "-m", "conch", "up", "--model-repository", str(repo),
            "--http-port", str(free_port()), "--grpc-port", str(free_port()),
            "--ready-timeout", "120"]  # fmt: skip
    with log.open("wb") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=run_env,
                              timeout=170).returncode  # fmt: skip
    return code, log.read_text(errors="replace"), log.stat().st_size


def test_a_backend_that_cannot_be_imported_stops_conch_up_with_the_import_error(
    model_repository: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "simple").symlink_to(model_repository / "simple")
    subprocess.run(
        [sys.executable, str(Path(__file__).parents[2] / "examples" / "make_backend_models.py"),
         str(repo)],
        check=True, capture_output=True,
    )  # fmt: skip
    code, out, size = _conch_up_log(tmp_path, repo, _shadowed(tmp_path, "torch"))
    assert code == 1, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("conch up:")]
    assert said and "failed to load" in said[-1] and "No module named 'torch'" in said[-1], said
    assert "Conch is ready" not in out
    assert size < 1_000_000


def test_gateway_processes_that_crash_at_start_are_not_restarted_forever(
    model_repository: Path, tmp_path: Path
) -> None:
    """uvicorn's supervisor restarted them in a tight loop (16 MB of tracebacks in minutes)."""
    code, out, size = _conch_up_log(tmp_path, model_repository, _shadowed(tmp_path, "litestar"))
    assert code == 1, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("conch up:")]
    assert said and "service gateway cannot start" in said[-1], said
    assert "No module named 'litestar'" in said[-1], said
    assert out.count("gateway process exited; starting it again") == 4  # 5 attempts in all
    assert size < 1_000_000


def test_no_other_process_can_join_the_gateway_ports(startup_mesh: Mesh) -> None:
    """HTTP (shared by the processes through one inherited socket) and gRPC (one process) are
    bound without SO_REUSEPORT: a stranger asking for SO_REUSEPORT is refused, as is anyone."""
    mesh = startup_mesh
    grpc_port = free_port()
    mesh.start_gateway(processes=2, CONCH_GATEWAY_GRPC_PORT=str(grpc_port))

    def listening(port: int) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    # Both listening (gRPC: the first process's).
    ports = (mesh.http_port, grpc_port)
    assert until_sync(lambda: all(listening(port) for port in ports), 60, every=0.1), mesh.logs()
    for port in (mesh.http_port, grpc_port):
        for host in ("127.0.0.1", "0.0.0.0"):
            with socket.socket() as stranger:
                stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                with pytest.raises(OSError, match="Address already in use"):
                    stranger.bind((host, port))

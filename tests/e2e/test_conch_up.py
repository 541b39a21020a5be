"""`conch up` as a user runs it: one command, a private Redis, restarts, a clean stop."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from tests.mesh import ConchUpOutput, start_conch_up, stop_conch_up
from tests.waiting import eventually_sync, retrying_sync, until_sync

pytestmark = pytest.mark.e2e


def test_conch_up_serves_restarts_and_stops(model_repository: Path) -> None:
    port = free_port()
    process = start_conch_up(model_repository, "--http-port", str(port), "--gateways", "2")
    output = ConchUpOutput(process)
    seen = output.seen
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 120)
        client = httpclient.InferenceServerClient(f"localhost:{port}")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)

        # A worker that dies is restarted by `conch up`, and the model comes back.
        worker_pid = next(
            json.loads(line)["pid"]
            for line in seen
            if line.startswith("{") and '"service started"' in line and "worker-onnx" in line
        )
        os.kill(worker_pid, signal.SIGKILL)
        output.wait_for(r'"service restarted".*"target":"worker-onnxruntime', 30)
        until_sync(lambda: client.is_model_ready("simple"), 60, every=0.2)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
        children = psutil.Process(process.pid).children(recursive=True)
        assert any(
            "redis" in " ".join(c.cmdline()) or "valkey" in " ".join(c.cmdline()) for c in children
        ), "conch up should start its own Redis"
    finally:
        alive = stop_conch_up(process)
    assert process.returncode == 0
    assert not alive, f"left running after SIGTERM: {[p.cmdline() for p in alive]}"


def test_conch_up_with_envoy_serves_through_the_edge(model_repository: Path) -> None:
    pytest.importorskip("envoy.service.discovery.v3.ads_pb2_grpc")
    http_port, envoy_port = free_port(), free_port()
    grpc_port, envoy_grpc_port = free_port(), free_port()
    process = start_conch_up(
        model_repository,
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        "--with-envoy",
        "--envoy-port",
        str(envoy_port),
        "--envoy-grpc-port",
        str(envoy_grpc_port),
    )
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Envoy \(edge\) gRPC at 127.0.0.1:{envoy_grpc_port}", 120)
        output.wait_for(rf"Conch is ready at http://127.0.0.1:{envoy_port}", 10)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{envoy_port}")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a, binary_data=True)
        for _ in range(20):
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))

        # KServe v2 gRPC through the edge: on Envoy's gRPC port (Triton's 8001 beside 8000),
        # and on its HTTP port too (routed by content-type application/grpc).
        for port in (envoy_grpc_port, envoy_port):
            grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
            # The gateways' gRPC endpoints pass Envoy's first health check a moment later.
            assert retrying_sync(grpc.is_server_ready, 10, every=0.2)
            assert grpc.get_model_metadata("simple").platform == "onnxruntime_onnx"
            grpc_inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in grpc_inputs:
                tensor.set_data_from_numpy(a)
            for _ in range(5):
                result = grpc.infer("simple", grpc_inputs)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
            grpc.close()
    finally:
        alive = stop_conch_up(process)
    assert not alive, f"left running after SIGTERM: {[p.cmdline() for p in alive]}"


SLOW_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.25)  # each batch takes a while: requests are still queued when Ctrl-C comes
        answers = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value * 2)]))
        return answers
"""

SLOW_CONFIG = """
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""


def test_stopping_conch_up_answers_the_requests_in_flight(tmp_path: Path) -> None:
    """Ctrl-C while requests are queued: the gateways drain them (the scheduler and workers
    stop after the gateways), so no client sees a dropped connection."""
    model = tmp_path / "repo" / "slow"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(SLOW_MODEL)
    (model / "config.pbtxt").write_text(SLOW_CONFIG)
    port = free_port()
    process = start_conch_up(tmp_path / "repo", "--http-port", str(port))
    output = ConchUpOutput(process)
    answers: queue.Queue[object] = queue.Queue()

    def ask(value: int) -> None:
        client = httpclient.InferenceServerClient(f"localhost:{port}", network_timeout=60)
        tensor = httpclient.InferInput("INPUT0", [1], "INT64")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int64))
        try:
            answers.put((value, client.infer("slow", [tensor]).as_numpy("OUTPUT0")[0]))
        except Exception as exc:  # a dropped connection or an error answer: the test fails
            answers.put((value, exc))

    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 120)
        threads = [threading.Thread(target=ask, args=(v,)) for v in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # all six sent; at 0.25 s a request, most are still waiting
        process.send_signal(signal.SIGINT)
        for thread in threads:
            thread.join(timeout=60)
        got = dict(answers.get_nowait() for _ in range(6))
        assert got == {v: 2 * v for v in range(6)}, got
        process.wait(timeout=60)
        assert process.returncode == 0
        assert not any("Cancel" in line and "running task" in line for line in output.seen)
    finally:
        if process.poll() is None:
            process.kill()


def test_conch_up_restarts_its_redis(model_repository: Path) -> None:
    """The private Redis dies: `conch up` starts it again and the mesh serves again, with no
    action from the user (the answers in between are 503s that say Redis is unreachable)."""
    port = free_port()
    process = start_conch_up(model_repository, "--http-port", str(port))
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 120)
        client = httpclient.InferenceServerClient(f"localhost:{port}")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
        redis_server = next(
            c
            for c in psutil.Process(process.pid).children(recursive=True)
            if "redis" in " ".join(c.cmdline()) or "valkey" in " ".join(c.cmdline())
        )
        redis_server.kill()
        output.wait_for(r'"private redis restarted"', 30)
        result = retrying_sync(  # answers come back once the heartbeats restore the registry
            lambda: client.infer("simple", inputs), 30, every=0.3, errors=InferenceServerException
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    finally:
        alive = stop_conch_up(process)
    assert process.returncode == 0
    assert not alive, f"left running after SIGTERM: {[p.cmdline() for p in alive]}"


def test_conch_up_protocol_flags(model_repository: Path) -> None:
    """--server-name (default unchanged), --cache-config local (a private cache Redis, the
    cached model answered from it), --allow-client-shm, gRPC keepalive flags accepted."""
    port = free_port()
    process = start_conch_up(
        model_repository,
        "--http-port",
        str(port),
        "--gateways",
        "1",
        "--server-name",
        "triton",
        "--cache-config",
        "local,size=8M",
        "--allow-client-shm",
        "--grpc-keepalive-time",
        "10000",
    )
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Conch is ready at http://localhost:{port}", 120)
        assert any("response cache started" in line for line in output.seen)
        client = httpclient.InferenceServerClient(f"localhost:{port}")
        assert client.get_server_metadata()["name"] == "triton"
        client.unregister_system_shared_memory()  # allowed: no "disabled" error
        x = np.ones((1, 256), dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [1, 256], "FP32")
        tensor.set_data_from_numpy(x)
        first = client.infer("mlp_cached", [tensor]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(
            client.infer("mlp_cached", [tensor]).as_numpy("OUTPUT0"), first
        )
        stats = eventually_sync(
            lambda: client.get_inference_statistics("mlp_cached")["model_stats"][0],
            lambda found: found["inference_stats"]["cache_hit"]["count"] == 1,
            10,
            every=0.2,
        )
        assert stats["inference_stats"]["cache_hit"]["count"] == 1
    finally:
        alive = stop_conch_up(process)
    assert process.returncode == 0
    assert not alive, f"left running after SIGTERM: {[p.cmdline() for p in alive]}"

"""SIGTERM drains (issue 12, defect 6): a gateway that is told to stop answers the requests it
holds before it exits (a rolling restart cuts none), and takes no new connection meanwhile."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database

pytestmark = pytest.mark.e2e


@pytest.fixture
def drain_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    mesh = Mesh(redis_server.url, model_repository, log_dir=tmp_path_factory.mktemp("logs"))
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(processes=1)
        mesh.wait_ready(["simple"])
        yield mesh
    finally:
        os.killpg(mesh.processes["worker"].pid, signal.SIGCONT)
        mesh.stop()


def test_a_stopping_gateway_answers_what_it_holds(drain_mesh: Mesh) -> None:
    mesh = drain_mesh
    worker, gateway = mesh.processes["worker"], mesh.processes["gateway"]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    client = httpclient.InferenceServerClient(mesh.url, network_timeout=60)
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["result"] = client.infer("simple", inputs).as_numpy("OUTPUT0")
        except Exception as exc:  # reported by the assertions below
            outcome["error"] = exc

    os.killpg(worker.pid, signal.SIGSTOP)  # the request will wait for the worker
    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(1.0)
    os.killpg(gateway.pid, signal.SIGTERM)
    time.sleep(1.5)
    host, port = mesh.url.split(":")
    with pytest.raises(OSError):  # stopped listening: a new caller goes elsewhere
        socket.create_connection((host, int(port)), timeout=2).close()
    assert gateway.poll() is None, "the gateway exited with a request in flight"
    os.killpg(worker.pid, signal.SIGCONT)
    thread.join(30)
    assert "error" not in outcome, outcome.get("error")
    np.testing.assert_array_equal(outcome["result"], 2 * a)
    # uvicorn re-raises the signal once it has shut down cleanly: the exit says SIGTERM.
    assert gateway.wait(timeout=30) in (0, -signal.SIGTERM)

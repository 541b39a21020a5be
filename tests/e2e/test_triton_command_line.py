"""A Triton start-up line starts `conch up` unchanged, and `tritonclient` calls what it serves.

Issue 27: Triton's syntax (``--opt=VALUE``, booleans with values), its model-control options,
``--exit-on-error=false`` serving the models that loaded, and a Triton option Conch does not
implement refused by name before anything starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conch.ports import free_port
from gateway.settings import GatewaySettings
from tests.mesh import ConchUpOutput, start_conch_up, stop_conch_up
from tests.s3_server import self_signed

pytestmark = pytest.mark.e2e


@pytest.fixture
def repository(model_repository: Path, tmp_path: Path) -> Path:
    """`simple` (ONNX) and `broken`, an ONNX model whose file is not a model: one worker."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "simple").symlink_to(model_repository / "simple")
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "model.onnx").write_bytes(b"not an onnx model")
    config = (model_repository / "simple" / "config.pbtxt").read_text()
    (broken / "config.pbtxt").write_text(config.replace('name: "simple"', 'name: "broken"'))
    return repo


def _infer_simple(port: int) -> None:
    client = httpclient.InferenceServerClient(f"localhost:{port}")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)


def test_a_triton_start_up_line_serves_as_written(repository: Path) -> None:
    http_port, grpc_port = free_port(), free_port()
    line = (
        "--model-control-mode=explicit --load-model=simple --strict-model-config=false "
        "--exit-on-error=false --grpc-use-ssl=false --repository-poll-secs=5 --log-verbose=0 "
        f"--allow-metrics=true --reuse-http-port false --id=triton --http-port={http_port} "
        f"--grpc-port {grpc_port} --http-address=127.0.0.1 --grpc-address=127.0.0.1"
    )
    process = start_conch_up(repository, *line.split())
    output = ConchUpOutput(process)
    try:
        # explicit mode: conch up waits for the --load-model models only
        output.wait_for(rf"Conch is ready at http://localhost:{http_port}  \(models: simple\)", 120)
        _infer_simple(http_port)
        grpc = grpcclient.InferenceServerClient(f"localhost:{grpc_port}")
        assert grpc.get_server_metadata().name == "triton"  # --id
    finally:
        alive = stop_conch_up(process)
    assert process.returncode == 0
    assert not alive


def test_exit_on_error_false_serves_the_models_that_loaded(repository: Path) -> None:
    http_port = free_port()
    process = start_conch_up(repository, f"--http-port={http_port}", "--exit-on-error=false")
    output = ConchUpOutput(process)
    try:
        output.wait_for(r"model failed to load: broken: ", 120)
        output.wait_for(rf"Conch is ready at http://localhost:{http_port}  \(models: simple\)", 60)
        _infer_simple(http_port)
    finally:
        alive = stop_conch_up(process)
    assert not alive


def test_exit_on_error_true_stops_at_a_model_that_fails(repository: Path) -> None:
    process = start_conch_up(repository, f"--http-port={free_port()}", "--exit-on-error", "true")
    out, _ = process.communicate(timeout=150)
    assert process.returncode == 1, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("conch up:")]
    assert said and "model 'broken' failed to load" in said[-1], said
    assert "Conch is ready" not in out


def test_a_triton_option_conch_does_not_implement_stops_it_by_name(repository: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    argv = [sys.executable, "-m", "conch", "up", f"--model-repository={repository}"]
    done = subprocess.run(
        [*argv, "--metrics-port=8002"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("conch up: --metrics-port is not supported: metrics have no")
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


@pytest.mark.skipif(
    "http_use_ssl" not in GatewaySettings.__struct_fields__,
    reason="needs the gateway's HTTPS (issue 27's TLS part)",
)
def test_conch_up_behind_mutual_tls_probes_itself_and_says_https(
    repository: Path, tmp_path: Path
) -> None:
    """`--http-use-ssl-mutual`: conch up's own probes (supervisor, readiness) go over HTTPS
    presenting the server's certificate; it prints an https URL; a client with a certificate of
    the root gets answers, one without is refused at the handshake."""
    cert, key = self_signed(tmp_path, "127.0.0.1")  # its own CA: the root of the clients too
    http_port = free_port()
    tls = f"--http-server-cert={cert} --http-server-key={key} --http-root-cert={cert}"
    tls += " --exit-on-error=false"  # `broken` is not what this test is about
    process = start_conch_up(
        repository, f"--http-port={http_port}", "--http-use-ssl-mutual=true", *tls.split()
    )
    output = ConchUpOutput(process)
    try:
        output.wait_for(rf"Conch is ready at https://localhost:{http_port}", 120)
        ssl_options = {"keyfile": str(key), "certfile": str(cert), "ca_certs": str(cert)}
        client = httpclient.InferenceServerClient(
            f"127.0.0.1:{http_port}", ssl=True, ssl_options=ssl_options
        )
        assert client.is_model_ready("simple")
        client.close()
        stranger = httpclient.InferenceServerClient(
            f"127.0.0.1:{http_port}", ssl=True, ssl_options={"ca_certs": str(cert)}
        )
        with pytest.raises(Exception):  # noqa: B017 (gevent's SSL error, whatever its class)
            stranger.is_server_live()
        stranger.close()
    finally:
        alive = stop_conch_up(process)
    assert not alive

"""TLS and mutual TLS on the gateway, HTTP and gRPC, with tritonclient's own SSL options.

One worker and scheduler, two gateways on the same Redis: one serves HTTPS and gRPC over TLS,
the other asks for client certificates (mutual TLS) on both. The certificates are made by the
test (``tests.certificates``): the right authority's client is served; no certificate, or one
from another authority, is refused at the TLS handshake (an SSL error, never an HTTP status).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gevent.ssl  # type: ignore[import-untyped]  # gevent ships no stubs
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from geventhttpclient.response import HTTPConnectionClosed
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.runtime.exits import EXIT_FINAL
from tests.certificates import Pair, Pki, handshake, make_pki
from tests.mesh import ROOT, Mesh, flush_database
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Ports:
    http: int
    grpc: int


@dataclass(frozen=True)
class TlsMesh:
    mesh: Mesh
    pki: Pki
    tls: Ports  # TLS, no client certificate asked
    mutual: Ports  # mutual TLS


def _tls_env(pki: Pki, mutual: bool) -> dict[str, str]:
    env: dict[str, str] = {}
    for protocol in ("HTTP", "GRPC"):
        env |= {
            f"CONCH_GATEWAY_{protocol}_USE_SSL": "true",
            f"CONCH_GATEWAY_{protocol}_SERVER_CERT": str(pki.server.cert_path),
            f"CONCH_GATEWAY_{protocol}_SERVER_KEY": str(pki.server.key_path),
            f"CONCH_GATEWAY_{protocol}_ROOT_CERT": str(pki.ca.cert_path),
            f"CONCH_GATEWAY_{protocol}_USE_SSL_MUTUAL": str(mutual).lower(),
        }
    return env


def http_client(pki: Pki, port: int, client: Pair | None) -> httpclient.InferenceServerClient:
    options = {"ca_certs": str(pki.ca.cert_path)}
    if client is not None:
        options |= {"certfile": str(client.cert_path), "keyfile": str(client.key_path)}
    return httpclient.InferenceServerClient(
        f"localhost:{port}", ssl=True, ssl_options=options, network_timeout=10
    )


def grpc_client(pki: Pki, port: int, client: Pair | None) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(
        f"localhost:{port}",
        ssl=True,
        root_certificates=str(pki.ca.cert_path),
        private_key=str(client.key_path) if client else None,
        certificate_chain=str(client.cert_path) if client else None,
    )


@pytest.fixture(scope="module")
def tls_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsMesh]:
    flush_database(redis_server.url)
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    mesh = Mesh(redis_server.url, model_repository, log_dir=tmp_path_factory.mktemp("tls_logs"))
    tls, mutual = Ports(mesh.http_port, free_port()), Ports(free_port(), free_port())
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(
            1, "gateway-tls", CONCH_GATEWAY_GRPC_PORT=str(tls.grpc), **_tls_env(pki, False)
        )
        mesh.start_gateway(
            1,
            "gateway-mtls",
            CONCH_GATEWAY_HTTP_PORT=str(mutual.http),
            CONCH_GATEWAY_GRPC_PORT=str(mutual.grpc),
            **_tls_env(pki, True),
        )

        def ready() -> bool:
            mesh.raise_if_dead()
            try:
                return all(
                    c.is_server_ready() and c.is_model_ready("simple")
                    for c in (
                        http_client(pki, tls.http, None),
                        http_client(pki, mutual.http, pki.client),
                        grpc_client(pki, tls.grpc, None),
                        grpc_client(pki, mutual.grpc, pki.client),
                    )
                )
            except (InferenceServerException, OSError):
                return False

        wait_until(ready, 90, every=0.3, failure=lambda: f"not ready: {mesh.logs()}")
        yield TlsMesh(mesh, pki, tls, mutual)
    finally:
        mesh.stop()


def _http_inputs() -> tuple[list[httpclient.InferInput], np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", a)):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs, a + a


def _grpc_inputs() -> tuple[list[grpcclient.InferInput], np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", a)):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs, a + a


def _http_infer(client: httpclient.InferenceServerClient) -> None:
    inputs, expected = _http_inputs()
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def _grpc_infer(client: grpcclient.InferenceServerClient) -> None:
    inputs, expected = _grpc_inputs()
    result = client.infer("simple", inputs, client_timeout=10)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)


def test_https_and_grpc_tls_infer(tls_mesh: TlsMesh) -> None:
    pki = tls_mesh.pki
    _http_infer(http_client(pki, tls_mesh.tls.http, None))
    _grpc_infer(grpc_client(pki, tls_mesh.tls.grpc, None))
    # What the client was shown is the configured certificate.
    shown = handshake("127.0.0.1", tls_mesh.tls.http, pki.ca.cert_path)
    assert shown.serial_number == pki.server.serial


def test_mutual_tls_serves_the_right_authoritys_client(tls_mesh: TlsMesh) -> None:
    pki = tls_mesh.pki
    _http_infer(http_client(pki, tls_mesh.mutual.http, pki.client))
    _grpc_infer(grpc_client(pki, tls_mesh.mutual.grpc, pki.client))


def _tls12_context(cafile: str | None = None) -> gevent.ssl.SSLContext:
    """A client context that stops at TLS 1.2, where the server checks the client's
    certificate inside the handshake (TLS 1.3 sends its refusal right after it)."""
    context = gevent.ssl.create_default_context(cafile=cafile)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


@pytest.mark.parametrize("who", ["no certificate", "wrong authority"])
def test_mutual_tls_refuses_at_the_handshake(tls_mesh: TlsMesh, who: str) -> None:
    pki = tls_mesh.pki
    client = None if who == "no certificate" else pki.wrong_client
    options = {"ca_certs": str(pki.ca.cert_path)}
    if client is not None:
        options |= {"certfile": str(client.cert_path), "keyfile": str(client.key_path)}
    refused = httpclient.InferenceServerClient(
        f"localhost:{tls_mesh.mutual.http}",
        ssl=True,
        ssl_options=options,
        ssl_context_factory=_tls12_context,
        network_timeout=10,
    )
    # The handshake itself fails: an SSL error before any HTTP exchange, no status.
    with pytest.raises(ssl.SSLError):
        _http_infer(refused)
    with pytest.raises(ssl.SSLError):
        handshake("127.0.0.1", tls_mesh.mutual.http, pki.ca.cert_path, client, tls12=True)
    # The same handshake with the right client's certificate completes (so the one above
    # failed on the certificate, not on the connection).
    handshake("127.0.0.1", tls_mesh.mutual.http, pki.ca.cert_path, pki.client, tls12=True)
    # TLS 1.3 (the default): the refusal comes right after the client's part of the
    # handshake; the connection ends before any byte of an answer.
    with pytest.raises((OSError, HTTPConnectionClosed)):
        _http_infer(http_client(pki, tls_mesh.mutual.http, client))
    # gRPC: the channel never connects (UNAVAILABLE, the TLS handshake failed).
    with pytest.raises(InferenceServerException) as failed:
        _grpc_infer(grpc_client(pki, tls_mesh.mutual.grpc, client))
    assert failed.value.status() == "StatusCode.UNAVAILABLE", failed.value


def test_plain_clients_cannot_talk_to_the_tls_ports(tls_mesh: TlsMesh) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tls_mesh.tls.http}/v2/health/live", timeout=5)
    with pytest.raises(InferenceServerException) as failed:
        _grpc_infer(grpcclient.InferenceServerClient(f"127.0.0.1:{tls_mesh.tls.grpc}"))
    assert failed.value.status() == "StatusCode.UNAVAILABLE", failed.value


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CONCH_GATEWAY_GRPC_USE_SSL": "true"}, "CONCH_GATEWAY_GRPC_SERVER_CERT"),
        (
            {
                "CONCH_GATEWAY_HTTP_USE_SSL": "true",
                "CONCH_GATEWAY_HTTP_SERVER_CERT": "/nonexistent/server.crt",
                "CONCH_GATEWAY_HTTP_SERVER_KEY": "/nonexistent/server.key",
            },
            "CONCH_GATEWAY_HTTP_SERVER_CERT",
        ),
        ("mutual-no-root", "CONCH_GATEWAY_HTTP_ROOT_CERT"),
        ("key-of-another", "CONCH_GATEWAY_GRPC_SERVER_KEY"),
    ],
)
def test_a_tls_setting_that_cannot_work_stops_the_gateway(
    tls_mesh: TlsMesh, env: dict[str, str] | str, named: str
) -> None:
    pki = tls_mesh.pki
    if env == "mutual-no-root":
        env = {
            "CONCH_GATEWAY_HTTP_USE_SSL_MUTUAL": "true",
            "CONCH_GATEWAY_HTTP_SERVER_CERT": str(pki.server.cert_path),
            "CONCH_GATEWAY_HTTP_SERVER_KEY": str(pki.server.key_path),
        }
    elif env == "key-of-another":
        env = {
            "CONCH_GATEWAY_GRPC_USE_SSL": "true",
            "CONCH_GATEWAY_GRPC_SERVER_CERT": str(pki.server.cert_path),
            "CONCH_GATEWAY_GRPC_SERVER_KEY": str(pki.client.key_path),
        }
    assert isinstance(env, dict)
    done = subprocess.run(
        [sys.executable, "-m", "gateway"],
        env={
            **os.environ,
            "CONCH_GATEWAY_HOST": "127.0.0.1",
            "CONCH_GATEWAY_HTTP_PORT": str(free_port()),
            "CONCH_GATEWAY_GRPC_PORT": str(free_port()),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == EXIT_FINAL, done.stderr
    assert named in done.stderr, done.stderr

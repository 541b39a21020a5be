"""`conch up` probes a gateway behind `--http-use-ssl` over HTTPS, verifying it (issue 27).

A real HTTPS server on loopback with certificates made here: the probe's context trusts the
server's own certificate (no CA given) and, under mutual TLS, presents that certificate as its
client certificate; without the context, or without the client certificate, the probe fails.
"""

from __future__ import annotations

import datetime
import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conch import http_wait


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.crt, and server.crt/.key signed by it (for a name the probe does not dial)."""
    where = tmp_path_factory.mktemp("certs")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test ca"))
        .issuer_name(_name("test ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write(where / "ca", ca, ca_key)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gateway.example"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("gateway.example")]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(where / "server", cert, key)
    return where


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def _serve(certs: Path, mutual: bool) -> Iterator[str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "server.crt", certs / "server.key")
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs / "ca.crt")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}/v2/health/live"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def https_url(certs: Path) -> Iterator[str]:
    yield from _serve(certs, mutual=False)


@pytest.fixture
def mutual_url(certs: Path) -> Iterator[str]:
    yield from _serve(certs, mutual=True)


def test_the_probe_trusts_the_servers_own_certificate(certs: Path, https_url: str) -> None:
    context = http_wait.tls_context(str(certs / "server.crt"))
    assert http_wait.answers(https_url, 2, context)
    assert http_wait.wait_ok(https_url, 5, context=context)


def test_without_its_context_the_probe_does_not_trust_the_server(https_url: str) -> None:
    assert not http_wait.answers(https_url, 2, None)


def test_the_ca_verifies_the_chain_and_a_strangers_trust_is_refused(
    certs: Path, https_url: str
) -> None:
    context = http_wait.tls_context(str(certs / "ca.crt"))  # the CA alone: chain verified too
    assert http_wait.answers(https_url, 2, context)
    stranger = ssl.create_default_context()  # the system's CAs: not ours
    assert not http_wait.answers(https_url, 2, stranger)


def test_under_mutual_tls_the_probe_presents_the_servers_certificate(
    certs: Path, mutual_url: str
) -> None:
    server = (str(certs / "server.crt"), str(certs / "server.key"))
    bare = http_wait.tls_context(server[0], str(certs / "ca.crt"))
    assert not http_wait.answers(mutual_url, 2, bare)
    presenting = http_wait.tls_context(server[0], str(certs / "ca.crt"), client=server)
    assert http_wait.answers(mutual_url, 2, presenting)

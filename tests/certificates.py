"""Certificates the TLS tests make for themselves (``cryptography``), written as PEM files.

``make_pki(directory)`` gives one authority with a server certificate for 127.0.0.1 and
localhost and a client certificate, plus a second, unrelated authority with its own client
certificate: the "wrong" client that mutual TLS must refuse. ``issue_server`` makes another
server certificate from the same authority (a rotation: a new serial and common name).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Authority:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_path: Path


@dataclass(frozen=True)
class Pair:
    """A certificate and its key, as PEM files."""

    cert_path: Path
    key_path: Path
    common_name: str
    serial: int


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Pair
    client: Pair
    wrong_ca: Authority
    wrong_client: Pair


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def authority(directory: Path, name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(hours=1))
        .not_valid_after(_now() + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Authority(name, key, cert, path)


def issue(ca: Authority, directory: Path, stem: str, common_name: str, *, server: bool) -> Pair:
    """A leaf certificate signed by ``ca``: for a server (127.0.0.1, localhost) or a client."""
    key = ec.generate_private_key(ec.SECP256R1())
    serial = x509.random_serial_number()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(_now() - datetime.timedelta(hours=1))
        .not_valid_after(_now() + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    write_pair(cert, key, cert_path, key_path)
    return Pair(cert_path, key_path, common_name, serial)


def write_pair(
    cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, cert_path: Path, key_path: Path
) -> None:
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = authority(directory, "conch-test-ca")
    wrong = authority(directory, "conch-wrong-ca")
    return Pki(
        ca=ca,
        server=issue(ca, directory, "server", "conch-server", server=True),
        client=issue(ca, directory, "client", "conch-client", server=False),
        wrong_ca=wrong,
        wrong_client=issue(wrong, directory, "wrong-client", "wrong-client", server=False),
    )


def handshake(
    host: str,
    port: int,
    ca_path: Path,
    client: Pair | None = None,
    timeout: float = 2.0,
    *,
    tls12: bool = False,
) -> x509.Certificate:
    """One TLS handshake on a NEW connection to ``host:port``, verified against ``ca_path``
    (with ``client``'s certificate, for a server that asks for one); the certificate the server
    showed. ``tls12``: at most TLS 1.2, where a server that refuses the client's certificate
    fails the handshake itself (TLS 1.3 sends that refusal after the client's side is done)."""
    context = ssl.create_default_context(cafile=str(ca_path))
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    if client is not None:
        context.load_cert_chain(client.cert_path, client.key_path)
    with (
        socket.create_connection((host, port), timeout) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)

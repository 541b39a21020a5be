"""TLS at the edge: Envoy's certificate (and, for mutual TLS, the clients' authority) as SDS
secrets over the same ADS stream, read from files the control plane watches.

Each listener's filter chain gets a ``DownstreamTlsContext`` that names two secrets, both fetched
over ADS: ``conch_edge_certificate`` (the certificate chain and key Envoy presents) and, with
mutual TLS, ``conch_edge_validation`` (the authority a client certificate must chain to; a client
without one is refused at the handshake). The files are read when the control plane starts (a
missing or mismatched file stops it) and then every ``EDGE_TLS_POLL_S``: when one changed and
the certificate and key again make a pair, the secrets get a new version and Envoy uses them for
new connections, with no restart of Envoy or of the control plane; connections already open keep
the certificate they were shown. A half-written rotation (a new certificate with the old key)
is not sent: the old pair stays until the files agree.
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy.config.core.v3 import base_pb2

# Registers DownstreamTlsContext, which the listeners' typed_config names.
from envoy.extensions.transport_sockets.tls.v3 import (
    secret_pb2,
    tls_pb2,  # noqa: F401
)
from google.protobuf import json_format
from google.protobuf.message import Message

from controlplane.settings import ControlPlaneSettings

log = logging.getLogger("controlplane.edge_tls")

SECRET = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
CERTIFICATE_SECRET = "conch_edge_certificate"
VALIDATION_SECRET = "conch_edge_validation"
_TLS_CONTEXT = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
_PREFIX = "CONCH_CONTROLPLANE_"


class CertificateError(ValueError):
    """An edge TLS setting that cannot work, naming the setting."""


@dataclass(frozen=True)
class EdgeCertificates:
    """What the secrets carry: PEM bytes as read from the files."""

    cert: bytes
    key: bytes
    root: bytes  # b"" unless mutual
    mutual: bool


def enabled(s: ControlPlaneSettings) -> bool:
    return bool(s.edge_tls_cert or s.edge_tls_key or s.edge_tls_mutual)


def _sds(name: str) -> dict[str, Any]:
    return {"name": name, "sds_config": {"ads": {}, "resource_api_version": "V3"}}


def transport_socket(mutual: bool) -> dict[str, Any]:
    """The listener's ``DownstreamTlsContext`` (Envoy's JSON), its secrets over ADS. ALPN
    offers HTTP/2 (gRPC needs it) and HTTP/1.1; the connection manager follows the choice."""
    common: dict[str, Any] = {
        "tls_certificate_sds_secret_configs": [_sds(CERTIFICATE_SECRET)],
        "alpn_protocols": ["h2", "http/1.1"],
    }
    context: dict[str, Any] = {"@type": _TLS_CONTEXT, "common_tls_context": common}
    if mutual:
        common["validation_context_sds_secret_config"] = _sds(VALIDATION_SECRET)
        context["require_client_certificate"] = True
    return {"name": "envoy.transport_sockets.tls", "typed_config": context}


def secure(listener: Message, mutual: bool) -> None:
    """Put TLS on every filter chain of a listener."""
    socket = json_format.ParseDict(transport_socket(mutual), base_pb2.TransportSocket())
    for chain in listener.filter_chains:  # type: ignore[attr-defined]  # envoy: no stubs
        chain.transport_socket.CopyFrom(socket)


def secrets(certificates: EdgeCertificates) -> dict[str, secret_pb2.Secret]:
    built = {
        CERTIFICATE_SECRET: {
            "name": CERTIFICATE_SECRET,
            "tls_certificate": {
                "certificate_chain": {"inline_string": certificates.cert.decode()},
                "private_key": {"inline_string": certificates.key.decode()},
            },
        }
    }
    if certificates.mutual:
        built[VALIDATION_SECRET] = {
            "name": VALIDATION_SECRET,
            "validation_context": {"trusted_ca": {"inline_string": certificates.root.decode()}},
        }
    return {name: json_format.ParseDict(c, secret_pb2.Secret()) for name, c in built.items()}


class CertificateFiles:
    """The edge's PEM files, read again when their metadata changes (``poll``)."""

    def __init__(self, s: ControlPlaneSettings):
        problems = []
        if not s.edge_tls_cert or not s.edge_tls_key:
            problems.append(
                f"{_PREFIX}EDGE_TLS_CERT and {_PREFIX}EDGE_TLS_KEY are both needed for TLS at "
                "the edge (a PEM certificate chain and its private key)"
            )
        if s.edge_tls_mutual and not s.edge_tls_root_cert:
            problems.append(
                f"{_PREFIX}EDGE_TLS_ROOT_CERT is empty; {_PREFIX}EDGE_TLS_MUTUAL needs the PEM "
                "file of the authority that client certificates must chain to"
            )
        if problems:
            raise CertificateError("; ".join(problems))
        self.mutual = s.edge_tls_mutual
        self._paths = {
            f"{_PREFIX}EDGE_TLS_CERT": s.edge_tls_cert,
            f"{_PREFIX}EDGE_TLS_KEY": s.edge_tls_key,
        }
        if self.mutual:
            self._paths[f"{_PREFIX}EDGE_TLS_ROOT_CERT"] = s.edge_tls_root_cert
        self._seen: tuple[tuple[int, int, int], ...] | None = None
        self._refused: str | None = None
        self.current = self._read()  # raises CertificateError: the service does not start
        self._seen = self._stamps()

    def _stamps(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in self._paths.values():
            try:
                st = os.stat(path)
                stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamps.append((0, 0, 0))
        return tuple(stamps)

    def _read(self) -> EdgeCertificates:
        contents = {}
        for setting, path in self._paths.items():
            try:
                contents[setting] = Path(path).read_bytes()
            except OSError as exc:
                raise CertificateError(
                    f"{setting}: cannot read {path!r} ({exc.strerror or exc})"
                ) from None
        cert_path, key_path = (
            self._paths[f"{_PREFIX}EDGE_TLS_CERT"],
            self._paths[f"{_PREFIX}EDGE_TLS_KEY"],
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert_path, key_path)
            if self.mutual:
                context.load_verify_locations(cafile=self._paths[f"{_PREFIX}EDGE_TLS_ROOT_CERT"])
        except (ssl.SSLError, OSError) as exc:
            raise CertificateError(
                f"{_PREFIX}EDGE_TLS_CERT, _KEY and _ROOT_CERT: {cert_path!r} and {key_path!r} "
                f"are not a PEM certificate and its key, or the root holds no certificate ({exc})"
            ) from None
        # What was checked is what was read: the files did not change in between.
        for setting, path in self._paths.items():
            if Path(path).read_bytes() != contents[setting]:
                raise CertificateError(f"{setting}: {path!r} changed while it was read")
        root = contents.get(f"{_PREFIX}EDGE_TLS_ROOT_CERT", b"")
        return EdgeCertificates(
            contents[f"{_PREFIX}EDGE_TLS_CERT"],
            contents[f"{_PREFIX}EDGE_TLS_KEY"],
            root,
            self.mutual,
        )

    def poll(self) -> bool:
        """Read the files again if they changed; True when the secrets must be sent anew."""
        stamps = self._stamps()
        if stamps == self._seen:
            return False
        try:
            fresh = self._read()
        except CertificateError as exc:
            if str(exc) != self._refused:
                log.warning(
                    "edge certificate files changed but cannot be used yet; keeping the "
                    "last good ones",
                    extra={"error": str(exc)},
                )
                self._refused = str(exc)
            return False  # stamps not remembered: read again at the next poll
        self._seen = stamps
        self._refused = None
        if fresh == self.current:
            return False
        self.current = fresh
        log.info("edge certificate files changed; sending new secrets")
        return True

"""TLS and mutual TLS on the gateway's HTTP and gRPC listeners, with Triton's flags' meaning.

Triton's ``--grpc-use-ssl``, ``--grpc-server-cert``, ``--grpc-server-key``, ``--grpc-root-cert``
and ``--grpc-use-ssl-mutual`` (and the same five for HTTP here): the server presents the
certificate and key (PEM files); the root certificate is the authority a client's certificate
must chain to; mutual TLS refuses, at the handshake, a client without such a certificate.
As in Triton, asking for mutual TLS turns TLS on.

``check`` runs once when the service starts (``gateway.__main__``): a missing, unreadable or
mismatched file stops it with a message naming the setting. The listeners then take their
options from ``uvicorn_options`` (HTTP, ``gateway.runtime.serve``) and ``grpc_credentials``
(``gateway.grpc.service``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from gateway.settings import GatewaySettings
from shared.wire.errors import ConchError, ErrorCode

_PREFIX = "CONCH_GATEWAY_"


@dataclass(frozen=True)
class TlsFiles:
    """One listener's TLS: its certificate and key, the clients' authority, mutual or not."""

    protocol: str  # "http" or "grpc": names the settings in messages
    cert: str
    key: str
    root: str
    mutual: bool

    def setting(self, field: str) -> str:
        return f"{_PREFIX}{self.protocol.upper()}_{field}"


def listener_tls(settings: GatewaySettings, protocol: str) -> TlsFiles | None:
    """The TLS of the ``http`` or ``grpc`` listener; None when it serves in the clear."""
    mutual = bool(getattr(settings, f"{protocol}_use_ssl_mutual"))
    if not (getattr(settings, f"{protocol}_use_ssl") or mutual):
        return None
    return TlsFiles(
        protocol,
        str(getattr(settings, f"{protocol}_server_cert")),
        str(getattr(settings, f"{protocol}_server_key")),
        str(getattr(settings, f"{protocol}_root_cert")),
        mutual,
    )


def check(settings: GatewaySettings) -> None:
    """``ConchError`` (INVALID_ARG) naming the first TLS setting that cannot work."""
    for protocol in ("http", "grpc"):
        tls = listener_tls(settings, protocol)
        if tls is not None:
            _check(tls)


def _check(tls: TlsFiles) -> None:
    why = f"{tls.setting('USE_SSL_MUTUAL' if tls.mutual else 'USE_SSL')} is on"
    for field, path in (("SERVER_CERT", tls.cert), ("SERVER_KEY", tls.key)):
        if not path:
            raise _invalid(f"{tls.setting(field)} is empty; {why}: give a PEM file")
        _readable(tls.setting(field), path)
    if tls.mutual and not tls.root:
        raise _invalid(
            f"{tls.setting('ROOT_CERT')} is empty; mutual TLS needs the PEM file of the "
            "authority that client certificates must chain to"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(tls.cert, tls.key)
    except (ssl.SSLError, OSError) as exc:
        raise _invalid(
            f"{tls.setting('SERVER_CERT')} and {tls.setting('SERVER_KEY')}: {tls.cert!r} and "
            f"{tls.key!r} are not a PEM certificate and its private key ({exc})"
        ) from None
    if tls.root:
        _readable(tls.setting("ROOT_CERT"), tls.root)
        try:
            context.load_verify_locations(cafile=tls.root)
        except (ssl.SSLError, OSError) as exc:
            raise _invalid(
                f"{tls.setting('ROOT_CERT')}: {tls.root!r} holds no PEM certificate ({exc})"
            ) from None


def _readable(setting: str, path: str) -> None:
    try:
        Path(path).read_bytes()
    except OSError as exc:
        raise _invalid(f"{setting}: cannot read {path!r} ({exc.strerror or exc})") from None


def _invalid(message: str) -> ConchError:
    return ConchError(ErrorCode.INVALID_ARG, message)


def uvicorn_options(settings: GatewaySettings) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments for the HTTP listener ({} in the clear)."""
    tls = listener_tls(settings, "http")
    if tls is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": tls.cert, "ssl_keyfile": tls.key}
    if tls.root:
        options["ssl_ca_certs"] = tls.root
    if tls.mutual:
        options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
    return options


def grpc_credentials(settings: GatewaySettings) -> grpc.ServerCredentials | None:
    """Credentials for ``add_secure_port``; None to serve gRPC in the clear."""
    tls = listener_tls(settings, "grpc")
    if tls is None:
        return None
    root = Path(tls.root).read_bytes() if tls.root else None
    return grpc.ssl_server_credentials(
        [(Path(tls.key).read_bytes(), Path(tls.cert).read_bytes())],
        root_certificates=root,
        require_client_auth=tls.mutual,
    )

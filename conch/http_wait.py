"""Wait for a URL to answer 200: how launchers know a service they started is up.

``https://`` URLs are probed with an ``ssl.SSLContext`` (:func:`tls_context`): ``conch up``'s own
gateway behind ``--http-use-ssl`` is verified against its own certificate (and the
``--http-root-cert`` CA); under ``--http-use-ssl-mutual`` the probe presents the server's
certificate as its client certificate, which that CA signed.
"""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit


def tls_context(
    server_cert: str, root_cert: str = "", client: tuple[str, str] | None = None
) -> ssl.SSLContext:
    """A context that trusts ``server_cert`` itself (and ``root_cert``'s CA), for probing a
    server this process started on an address its certificate need not name."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=server_cert)
    if root_cert:
        context.load_verify_locations(cafile=root_cert)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the anchor
    context.check_hostname = False  # probed by its bind address; the chain is still verified
    if client is not None:
        context.load_cert_chain(*client)
    return context


def get(
    url: str, timeout_s: float = 2.0, context: ssl.SSLContext | None = None
) -> tuple[int, bytes]:
    """One GET: the status and body. Raises ``OSError`` or ``http.client.HTTPException``."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            host, parts.port or 443, timeout=timeout_s, context=context
        )
    else:
        conn = http.client.HTTPConnection(host, parts.port or 80, timeout=timeout_s)
    try:
        path = parts.path or "/"
        conn.request("GET", f"{path}?{parts.query}" if parts.query else path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def answers(url: str, timeout_s: float = 0.5, context: ssl.SSLContext | None = None) -> bool:
    """Whether ``url`` answers 200 now."""
    try:
        return get(url, timeout_s, context)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def wait_ok(
    url: str,
    timeout_s: float,
    on_tick: Callable[[], None] | None = None,
    context: ssl.SSLContext | None = None,
) -> bool:
    """Poll ``url`` until it answers 200 (True) or ``timeout_s`` passes (False).

    ``on_tick`` runs between polls (a supervisor restarting what died meanwhile, say).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if on_tick is not None:
            on_tick()
        if answers(url, 2.0, context):
            return True
        time.sleep(0.2)
    return False

"""Bounded input at the front door: a body larger than the limit is never read past it, and a
compressed body is never inflated past it.

The limit (``CONCH_GATEWAY_MAX_REQUEST_BYTES``, ``conch up --max-request-bytes``; 64 MiB by
default) applies to the body as sent and again to the body once ``Content-Encoding`` is undone,
so a small gzip bomb costs at most the limit in memory and a bounded amount of CPU. A body
announced larger than the limit (``Content-Length``) is refused before a byte is read; one that
turns out larger while streaming in is refused as soon as it crosses the limit. Both answer 413
naming the limit; the connection is then closed, since the rest of the body is left unread.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from shared.wire.errors import ConchError, ErrorCode, invalid

# Inflate in steps of this many bytes, checking the limit between steps.
_STEP = 1 << 20


def too_large(limit: int, what: str = "request body") -> ConchError:
    return ConchError(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"{what} exceeds the gateway's limit of {limit} bytes "
        "(CONCH_GATEWAY_MAX_REQUEST_BYTES, conch up --max-request-bytes)",
    )


def check_announced_length(headers: Mapping[str, str], limit: int) -> None:
    """413 for a ``Content-Length`` over the limit, before the body is read."""
    announced = headers.get("content-length")
    if announced is None:
        return
    try:
        length = int(announced)
    except ValueError:
        raise invalid(f"Content-Length must be an integer, got '{announced}'") from None
    if length > limit:
        raise too_large(limit, f"request body of {length} bytes")


async def read_body(receive: Callable[[], Awaitable[dict[str, Any]]], limit: int) -> bytes | None:
    """The whole request body from ASGI ``receive``; None if the client disconnected. Raises
    413 as soon as the body crosses ``limit`` (what was read so far is dropped)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    """The body with its ``Content-Encoding`` undone, never more than ``limit`` bytes of it."""
    if not encoding or encoding == "identity":
        return body
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        raise invalid(f"unsupported Content-Encoding '{encoding}'; expected gzip or deflate")
    out: list[bytes] = []
    size = 0
    data = body
    try:
        while True:  # gzip allows several members, one after the other
            inflater = zlib.decompressobj(wbits)
            pending = data
            while True:
                chunk = inflater.decompress(pending, min(_STEP, limit - size + 1))
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, f"request body once {encoding}-decoded")
                out.append(chunk)
                pending = inflater.unconsumed_tail
                if inflater.eof or (not pending and not chunk):
                    break
            if not inflater.eof:
                raise invalid(f"request body is not valid {encoding} data: it ends early")
            data = inflater.unused_data
            if encoding != "gzip" or not data:
                break
    except zlib.error as exc:
        raise invalid(f"request body is not valid {encoding} data: {exc}") from None
    return b"".join(out)

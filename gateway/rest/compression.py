"""HTTP response compression, as Triton's HTTP server does it: when ``Accept-Encoding`` asks for
``gzip`` or ``deflate`` (the zlib format, as ``Content-Encoding: deflate`` means), a successful
response's body is compressed and ``Content-Encoding`` names the algorithm.

The choice is Triton's (``CompressionTypeUsed`` in its ``http_server.cc``): among ``identity``,
``gzip`` and ``deflate``, the one with the highest q-value, the first named on a tie, ``identity``
unless another has a q-value above 0. Conch also reads ``*`` as gzip and deflate where they are
not named. Compressed: every successful inference response, whatever its size (Triton
compresses the smallest one too); not compressed: the other routes (as Triton: its metadata,
config and statistics answers are plain, and ``tritonclient.http.aio`` relies on it), errors
(Triton's are not, and ``tritonclient`` reads an error body as plain JSON), empty bodies, and
event streams (sent as they come; Triton does not compress its generate stream either).

The binary tensor extension's ``Inference-Header-Content-Length`` keeps the length of the JSON
header in the uncompressed body (Triton's, and what ``tritonclient`` reads after inflating).
Request bodies are inflated by ``gateway.rest.request_limits``.
"""

from __future__ import annotations

import asyncio
import zlib

GZIP = "gzip"
DEFLATE = "deflate"
_IDENTITY = "identity"
# Bodies at least this large are compressed on a worker thread (zlib lets go of the GIL), so
# one large response does not hold up this process's other requests.
_THREAD_BYTES = 256 * 1024


def negotiate(accept_encoding: str | None) -> str | None:
    """The encoding to answer with (``gzip`` or ``deflate``), or None for the body as it is."""
    if not accept_encoding:
        return None
    chosen, weight = _IDENTITY, 0.0
    star: float | None = None
    named: set[str] = set()
    for item in accept_encoding.split(","):
        coding, _, params = item.partition(";")
        coding = coding.strip().lower()
        if not coding:
            continue
        quality = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value.strip())
                except ValueError:
                    quality = -1.0  # malformed: skipped, as Triton skips it
        if quality < 0:
            continue
        if coding == "*":
            star = quality
            continue
        named.add(coding)
        if coding in (_IDENTITY, GZIP, DEFLATE) and quality > weight:
            chosen, weight = coding, quality
    if star is not None and star > weight:
        for coding in (GZIP, DEFLATE):
            if coding not in named:
                chosen, weight = coding, star
                break
    return None if chosen == _IDENTITY else chosen


def compress_now(body: bytes, encoding: str) -> bytes:
    """zlib's default level, as Triton's DataCompressor uses."""
    if encoding == GZIP:
        packer = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return packer.compress(body) + packer.flush()
    return zlib.compress(body)


async def compress(body: bytes, encoding: str) -> bytes:
    if len(body) < _THREAD_BYTES:
        return compress_now(body, encoding)
    return await asyncio.to_thread(compress_now, body, encoding)

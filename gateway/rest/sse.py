"""Server-sent events: one ``data:`` line per response, a blank line after each.

Used by ``/generate_stream`` (Triton's generate extension) and by ``/infer`` when the client
accepts ``text/event-stream`` (Conch's streaming KServe v2, beyond Triton). An error after the
stream started is one last event ``data: {"error": "..."}``, as Triton's generate_stream sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import cast

import msgspec

from gateway.core.dataplane import InferOutcome
from gateway.errors import REDIS_ERRORS
from shared.wire.errors import ConchError

log = logging.getLogger(__name__)

MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def accepts_events(accept: str | None) -> bool:
    return bool(accept and MEDIA_TYPE in accept)


def event(body: bytes) -> bytes:
    return b"data: " + body + b"\n\n"


def error_event(message: str) -> bytes:
    return event(msgspec.json.encode({"error": message}))


async def events(
    frames: AsyncIterator[InferOutcome],
    first: InferOutcome | None,
    encode: Callable[[InferOutcome], bytes | None],
) -> AsyncIterator[bytes]:
    """Encode each frame as an event (``encode`` None: nothing to send for it, e.g. a
    flags-only final); a mid-stream error ends the stream as an error event. Closing this
    iterator (the client went away) closes ``frames``, which cancels the request."""
    try:
        if first is not None:
            body = encode(first)
            if body is not None:
                yield event(body)
        async for outcome in frames:
            body = encode(outcome)
            if body is not None:
                yield event(body)
    except ConchError as exc:
        yield error_event(exc.message)
    except REDIS_ERRORS as exc:
        yield error_event(f"the mesh's Redis is unavailable: {exc}")
    except (asyncio.CancelledError, GeneratorExit):
        raise
    except Exception as exc:  # the connection is the client's: tell it, keep the process
        log.exception("streaming response failed")
        yield error_event(f"internal error: {type(exc).__name__}")
    finally:
        with contextlib.suppress(BaseException):
            # An async generator (DataPlane.infer_stream); its annotation omits aclose.
            await cast(AsyncGenerator[InferOutcome, None], frames).aclose()


async def first_frame(frames: AsyncIterator[InferOutcome]) -> InferOutcome | None:
    """The first frame, so that refusals (raised before it) answer with an HTTP status rather
    than inside a 200 event stream; None when the stream ended without any."""
    try:
        return await frames.__anext__()
    except StopAsyncIteration:
        return None

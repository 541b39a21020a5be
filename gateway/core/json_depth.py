"""The nesting bound of client JSON, checked on the bytes before any parser recurses.

msgspec (like every recursive JSON decoder) recurses once per nested array or object: a body of
a few kilobytes of ``[[[[...`` would otherwise end in a ``RecursionError`` (a 500) instead of a
client error. The bound is far above anything a tensor needs (NumPy's 64 dimensions plus the
request's own three levels) and far below the interpreter's recursion limit.

The check costs a few ``bytes.find`` calls for an ordinary request: a document with no more
opening brackets than the bound cannot be nested deeper. They are counted with ``find`` (memchr,
many bytes per cycle) while there are few of them, which for a tensor request's handful of
brackets is about a quarter of two ``bytes.count`` calls over the body (a byte per step: 4.9
against 1.4 us for the harness's 2 kB ``mlp`` body); past ``_FEW`` of them the two counts
decide. Only a body with more brackets than the bound is scanned, in chunks, with NumPy
(strings and their escapes taken into account, so a bracket inside a string does not count).
"""

from __future__ import annotations

import numpy as np

from shared.wire.errors import invalid

MAX_JSON_DEPTH = 100
_CHUNK = 1 << 20
# Brackets counted one ``find`` at a time before the two ``bytes.count`` calls take over.
_FEW = 24
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))


def check_json_depth(raw: bytes | memoryview | str, what: str = "the request JSON") -> None:
    """Raise a client error naming the bound when ``raw`` nests deeper than ``MAX_JSON_DEPTH``."""
    if isinstance(raw, str):
        data = raw.encode("utf-8", errors="replace")
    else:
        data = bytes(raw) if isinstance(raw, memoryview) else raw
    if _few_brackets(data) or data.count(b"[") + data.count(b"{") <= MAX_JSON_DEPTH:
        return
    depth = json_depth(data, stop_above=MAX_JSON_DEPTH)
    if depth > MAX_JSON_DEPTH:
        raise invalid(
            f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (arrays and objects); "
            f"expected at most {MAX_JSON_DEPTH}"
        )


def _few_brackets(data: bytes) -> bool:
    """Whether ``data`` holds at most ``_FEW`` opening brackets (``[`` and ``{`` together)."""
    left = _FEW
    for bracket in (b"[", b"{"):
        at = data.find(bracket)
        while at >= 0:
            left -= 1
            if left < 0:
                return False
            at = data.find(bracket, at + 1)
    return True


def json_depth(data: bytes, stop_above: int | None = None, chunk_bytes: int = _CHUNK) -> int:
    """The deepest nesting of arrays and objects in ``data`` (JSON text, well formed or not);
    stops early once it exceeds ``stop_above``. ``chunk_bytes``: how much is scanned at once."""
    depth = deepest = 0
    in_string = False
    carried_backslashes = 0  # backslashes ending the previous chunk
    for start in range(0, len(data), chunk_bytes):
        size = min(chunk_bytes, len(data) - start)
        chunk = np.frombuffer(data, np.uint8, count=size, offset=start)
        positions = np.arange(len(chunk), dtype=np.int64)
        backslash = chunk == _BACKSLASH
        # The last position at or before i that is not a backslash (-1: none in this chunk).
        last_other = np.maximum.accumulate(np.where(backslash, -1, positions))
        quotes = np.flatnonzero(chunk == _QUOTE)
        before = quotes - 1
        safe = np.maximum(before, 0)
        runs = np.where(before >= 0, before - last_other[safe], 0)
        from_previous = (before < 0) | (last_other[safe] < 0)
        runs = runs + np.where(from_previous, carried_backslashes, 0)
        real_quotes = quotes[runs % 2 == 0]  # a quote after an odd run of backslashes is text
        brackets = np.flatnonzero(np.isin(chunk, _OPEN + _CLOSE))
        if len(brackets):
            quotes_before = np.searchsorted(real_quotes, brackets)
            outside = (quotes_before + int(in_string)) % 2 == 0
            kept = brackets[outside]
            if len(kept):
                steps = np.where(np.isin(chunk[kept], _OPEN), 1, -1)
                levels = depth + np.cumsum(steps)
                deepest = max(deepest, int(levels.max()))
                depth = int(levels[-1])
        in_string ^= bool(len(real_quotes) % 2)
        tail = len(chunk) - 1 - int(last_other[-1])
        carried_backslashes = tail + (carried_backslashes if last_other[-1] < 0 else 0)
        if stop_above is not None and deepest > stop_above:
            break
    return deepest

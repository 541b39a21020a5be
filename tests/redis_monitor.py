"""Record every command a Redis server runs (MONITOR) into a JSON-lines file, in a process of
its own so that the recording takes no time from the tests' event loops.

``python -m tests.redis_monitor <host> <port> <out.jsonl>``; each line is ``[client, [arg, ...]]``
where client is ``"lua"`` for a command a script ran, else the connection's address, and each
argument is cut to 120 characters (keys are short; values are not needed to find keys).
Stops on SIGTERM.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sys

_ARG = re.compile(rb'"((?:\\.|[^"\\])*)"')
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}
_CUT = 120


def _unescape(raw: bytes) -> str:
    out = bytearray()
    i = 0
    while i < len(raw) and len(out) < _CUT:
        c = raw[i : i + 1]
        if c == b"\\" and i + 1 < len(raw):
            nxt = raw[i + 1 : i + 2]
            if nxt == b"x" and i + 3 < len(raw):
                out += bytes([int(raw[i + 2 : i + 4], 16)])
                i += 4
                continue
            out += _ESCAPES.get(nxt, nxt)
            i += 2
            continue
        out += c
        i += 1
    return out[:_CUT].decode("latin-1")


def parse_line(line: bytes) -> tuple[str, list[str]] | None:
    """(client, args) of one MONITOR line, None for anything else (the +OK)."""
    start = line.find(b"[")
    end = line.find(b"]", start)
    if start < 0 or end < 0:
        return None
    client = line[start + 1 : end].split(b" ", 1)[-1].decode("latin-1")
    return client, [_unescape(m.group(1)) for m in _ARG.finditer(line, end)]


def main(host: str, port: int, out_path: str) -> None:
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    sock = socket.create_connection((host, port))
    sock.settimeout(0.2)
    sock.sendall(b"MONITOR\r\n")
    buffer = b""
    with open(out_path, "w") as out:
        while running:
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for line in lines:
                parsed = parse_line(line)
                if parsed is not None:
                    out.write(json.dumps(parsed) + "\n")
            out.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])

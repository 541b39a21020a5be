"""HTTP/1.1 on the wire for inference: what real clients and proxies send, over raw sockets.

Inference is answered by the gateway's ASGI app in front of Litestar (``gateway.rest.fastpath``, the
one REST inference path), so the connection semantics must hold there as on every other route:
keep-alive, pipelining, ``Expect: 100-continue``, chunked request bodies, ``Connection: close``,
HTTP/1.0, and a refusal before the body closes the connection. A client that disconnects has its
request cancelled: ``tests/e2e/test_streaming.py`` (queued and running requests).
"""

from __future__ import annotations

import contextlib
import json
import socket

import pytest

from tests.mesh import Mesh

BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
).encode()
PATH = b"/v2/models/simple/infer"


def _request(body: bytes = BODY, *, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return (
        b"POST " + PATH + b" HTTP/" + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body
    )


class Wire:
    """A blocking socket that reads whole HTTP responses (Content-Length framed)."""

    def __init__(self, mesh: Mesh):
        self.sock = socket.create_connection(("127.0.0.1", mesh.http_port), timeout=10)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed mid-response: {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            assert self._fill(), "connection closed mid-body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        return not self.buffer and self.sock.recv(1) == b""

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def wire(mesh: Mesh):
    connection = Wire(mesh)
    yield connection
    connection.close()


def _output0(body: bytes) -> list[int]:
    outputs = {o["name"]: o for o in json.loads(body)["outputs"]}
    return outputs["OUTPUT0"]["data"]


def test_keep_alive_serves_many_requests_on_one_connection(wire: Wire) -> None:
    for _ in range(5):
        wire.send(_request())
        status, headers, body = wire.response()
        assert status == 200, body
        assert headers["content-type"] == "application/json"
        assert "connection" not in headers
        assert _output0(body) == [i + 1 for i in range(16)]


def test_pipelined_requests_are_answered_in_order(wire: Wire) -> None:
    bodies = []
    for offset in range(4):
        payload = json.loads(BODY)
        payload["id"] = f"req-{offset}"
        payload["inputs"][1]["data"] = [offset] * 16
        bodies.append(json.dumps(payload).encode())
    wire.send(b"".join(_request(b) for b in bodies))  # all four before reading any answer
    for offset in range(4):
        status, _, body = wire.response()
        assert status == 200, body
        assert json.loads(body)["id"] == f"req-{offset}"
        assert _output0(body) == [i + offset for i in range(16)]


def test_expect_100_continue_gets_continue_then_the_answer(wire: Wire) -> None:
    head, _, body = _request(extra=b"Expect: 100-continue\r\n").partition(b"\r\n\r\n")
    wire.send(head + b"\r\n\r\n")
    while b"\r\n\r\n" not in wire.buffer:
        assert wire._fill()
    interim, _, wire.buffer = wire.buffer.partition(b"\r\n\r\n")
    assert interim.startswith(b"HTTP/1.1 100"), interim
    wire.send(body)
    status, _, answer = wire.response()
    assert status == 200, answer
    assert _output0(answer) == [i + 1 for i in range(16)]


def test_chunked_request_body(wire: Wire) -> None:
    chunks = [BODY[:100], BODY[100:101], BODY[101:]]
    encoded = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    wire.send(
        b"POST " + PATH + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + encoded
    )
    status, _, body = wire.response()
    assert status == 200, body
    assert _output0(body) == [i + 1 for i in range(16)]


@pytest.mark.parametrize(
    "request_bytes",
    [_request(extra=b"Connection: close\r\n"), _request(version=b"1.0")],
    ids=["connection-close", "http-1.0"],
)
def test_the_answer_comes_before_the_close(wire: Wire, request_bytes: bytes) -> None:
    wire.send(request_bytes)
    status, headers, body = wire.response()
    assert status == 200, body
    assert _output0(body) == [i + 1 for i in range(16)]
    assert headers["connection"] == "close"
    assert wire.closed_by_server()


def test_a_body_refused_from_its_headers_is_never_read_and_the_connection_closes(
    wire: Wire,
) -> None:
    """413 from the announced length alone: the body is not read, so the connection cannot
    carry another request and the server closes it after the answer."""
    wire.send(
        b"POST " + PATH + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000000000\r\n\r\n" + BODY
    )
    status, headers, body = wire.response()
    assert status == 413, body
    assert "error" in json.loads(body)
    assert headers["connection"] == "close"
    with contextlib.suppress(ConnectionResetError):  # closed with bytes of ours unread
        assert wire.sock.recv(1) == b""


def test_errors_keep_the_connection_usable(wire: Wire) -> None:
    wire.send(_request(b"{not json"))
    status, headers, body = wire.response()
    assert status == 400
    assert headers["content-type"] == "application/json"
    assert "error" in json.loads(body)
    wire.send(_request())
    status, _, body = wire.response()
    assert status == 200, body


def test_binary_answer_carries_the_header_length(wire: Wire) -> None:
    payload = json.loads(BODY)
    payload["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    wire.send(_request(json.dumps(payload).encode()))
    status, headers, body = wire.response()
    assert status == 200, body
    assert headers["content-type"] == "application/octet-stream"
    header_length = int(headers["inference-header-content-length"])
    header = json.loads(body[:header_length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 64
    assert len(body) == header_length + 64

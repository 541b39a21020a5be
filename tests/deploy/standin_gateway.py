"""A stand-in for ``conch gateway`` that keeps the gateway's registry contract, nothing more.

It reads the same environment as the real gateway (CONCH_REDIS_URL, CONCH_GATEWAY_HOST,
CONCH_GATEWAY_HTTP_PORT, CONCH_GATEWAY_ADVERTISE_HOST), heartbeats into
``conch:services:gateway`` / ``conch:service:gateway:<id>`` every second with a 3 s expiry,
answers ``GET /v2`` and the health endpoints, and deregisters on SIGTERM. The Envoy tests run it
as ``GATEWAY_COMMANDS["standin"]`` (``tests/deploy/deploy_procs.py``) beside the real gateway,
so a failure shows whether the edge or the gateway broke; the xDS update tests use only it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis

from shared.wire import keys

TTL_MS = 3000
INTERVAL_S = 1.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 65536  # one write per response (headers + body), flushed by http.server
    gateway_id = ""

    def do_GET(self) -> None:
        if self.path in ("/v2/health/live", "/v2/health/ready"):
            self._reply(200, b"")
        elif self.path == "/v2":
            body = {"name": "conch-standin", "version": "0", "gateway": self.gateway_id}
            self._reply(200, json.dumps(body).encode())
        else:
            self._reply(404, b'{"error": "not found"}')

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    env = os.environ
    bind = env.get("CONCH_GATEWAY_HOST", "127.0.0.1")
    port = int(env.get("CONCH_GATEWAY_HTTP_PORT", "8000"))
    advertise = env.get("CONCH_GATEWAY_ADVERTISE_HOST", "127.0.0.1")
    client = redis.Redis.from_url(env.get("CONCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
    gateway_id = f"standin-{os.getpid()}"
    Handler.gateway_id = gateway_id
    server = ThreadingHTTPServer((bind, port), Handler)
    server.daemon_threads = True
    stop = threading.Event()
    info = {"host": advertise, "port": str(port), "pid": str(os.getpid())}

    def heartbeat() -> None:
        while not stop.is_set():
            pipe = client.pipeline(transaction=False)
            pipe.zadd(
                keys.service_registry("gateway"), {gateway_id: int(time.time() * 1000) + TTL_MS}
            )
            pipe.hset(keys.service_info("gateway", gateway_id), mapping=info)
            pipe.pexpire(keys.service_info("gateway", gateway_id), TTL_MS)
            pipe.execute()
            stop.wait(INTERVAL_S)

    def on_term(signum: int, frame: object) -> None:
        stop.set()
        pipe = client.pipeline(transaction=False)
        pipe.zrem(keys.service_registry("gateway"), gateway_id)
        pipe.delete(keys.service_info("gateway", gateway_id))
        pipe.execute()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    threading.Thread(target=heartbeat, daemon=True).start()
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()

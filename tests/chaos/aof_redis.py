"""The chaos suite's Redis: persistence as compose ships it (``deploy/redis/redis.conf``), on TCP.

``appendonly yes`` with ``appendfsync everysec``: a restart replays the append-only file, so the
streams, groups and pending entries the mesh had are back. Only loopback TCP (no Unix socket):
the services reach it through the suite's own proxy (``tests/tcp_proxy.py``), and the
suite reads it directly.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import redis

from conch.ports import free_port
from conch.private_redis import find_binary
from tests.waiting import wait_until


class AofRedis:
    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> AofRedis:
        argv = [
            find_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--aof-use-rdb-preamble", "yes",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
        ]  # fmt: skip
        with open(self.dir / "redis.log", "ab") as log_file:
            self.process = subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2, socket_timeout=1)
        process = self.process

        def loaded() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"redis exited: {self.log()}")
            try:
                # Loading the AOF answers LOADING errors until it is done.
                return bool(client.ping()) and client.info("persistence").get("loading") == 0
            except redis.RedisError:
                return False

        try:
            wait_until(
                loaded,
                timeout_s,
                failure=lambda: f"redis did not answer on port {self.port}: {self.log()}",
            )
        finally:
            client.close()
        return self

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def log(self) -> str:
        path = self.dir / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

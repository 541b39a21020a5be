"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge, with
``tc netem`` delay on every namespace's link, so the mesh's parts talk over a real network hop.

Each part (Redis, the edge, a gateway, the scheduler, each worker, the client) gets a namespace
of its own and an address of the lab's subnet on ``eth0``. Where the kernel has ``sch_netem``,
a ``netem`` qdisc on that link delays every packet leaving the namespace (``set_delay``), so
each one-way message between two parts crosses one delayed hop; where it has not (this
machine's container kernel), ``tests.netns_mesh`` delays each hop in user space instead. The
bridge lives in a hub namespace of the lab's own: no route leads out, traffic stays between the
lab's namespaces. Needs root (CAP_NET_ADMIN) and Debian's iproute2 (``ip``, ``tc``);
``missing()`` says what is not there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


def missing() -> str | None:
    """Why the lab cannot run here, or None."""
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (Debian: apt-get install -y iproute2)"
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces"
    probe = f"c17probe{os.getpid()}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace (no CAP_NET_ADMIN?): {made.stderr.strip()}"
    try:
        veth = _run(
            "ip", "-n", probe, "link", "add", "d0", "type", "veth", "peer", "name", "d1",
            check=False,
        )  # fmt: skip
        if veth.returncode != 0:
            return f"cannot create veth pairs: {veth.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def has_netem(ns: str, dev: str) -> bool:
    """Whether the kernel has ``sch_netem`` (a container's kernel may lack the module)."""
    added = _run(
        "tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem", "delay", "0ms", check=False
    )
    return added.returncode == 0


@dataclass
class Lab:
    parts: list[str]
    subnet: str = "10.77.0"
    tag: str = field(default_factory=lambda: f"c17{os.getpid() % 100000}")
    addresses: dict[str, str] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    delay_ms: float = 0.0
    # Set by ``up``: whether hops can be delayed by the kernel (else by ``tests.tcp_proxy``).
    netem: bool = False

    def ns(self, part: str) -> str:
        return f"{self.tag}-{part}"

    @property
    def hub(self) -> str:
        return f"{self.tag}-hub"

    def up(self) -> Lab:
        _run("ip", "netns", "add", self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for index, part in enumerate(self.parts):
            ns, address = self.ns(part), f"{self.subnet}.{index + 2}"
            outer, inner = f"{self.tag}o{index}", f"{self.tag}i{index}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            _run("ip", "link", "set", outer, "netns", self.hub)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "-n", self.hub, "link", "set", outer, "master", "br0", "up")
            _run("ip", "-n", ns, "link", "set", inner, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            self.netem = has_netem(ns, "eth0") if index == 0 else self.netem
            if self.netem and index:
                _run("tc", "-n", ns, "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "0ms")
            self.addresses[part] = address
        return self

    def set_delay(self, ms: float) -> None:
        """The one-way delay of every hop (each namespace's egress), by the kernel's netem."""
        if not self.netem:
            raise RuntimeError("no sch_netem in this kernel: delay hops with tests.tcp_proxy")
        for part in self.parts:
            _run("tc", "-n", self.ns(part), "qdisc", "change", "dev", "eth0", "root", "netem",
                 "delay", f"{ms}ms")  # fmt: skip
        self.delay_ms = ms

    def cut(self, part: str) -> None:
        """Partition ``part``: its link leaves the bridge, so whatever it sends or is sent is
        silently dropped (connections stall, as across a failed switch; nothing is reset)."""
        _run("ip", "-n", self.hub, "link", "set", self._outer(part), "nomaster")

    def heal(self, part: str) -> None:
        _run("ip", "-n", self.hub, "link", "set", self._outer(part), "master", "br0")

    def _outer(self, part: str) -> str:
        return f"{self.tag}o{self.parts.index(part)}"

    def spawn(
        self, part: str, argv: list[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.ns(part), *argv],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def run(self, part: str, argv: list[str], env: dict[str, str], timeout: float) -> str:
        done = subprocess.run(
            ["ip", "netns", "exec", self.ns(part), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{argv} in {part} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        return done.stdout

    def down(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        for part in self.parts:
            _run("ip", "netns", "del", self.ns(part), check=False)
        _run("ip", "netns", "del", self.hub, check=False)

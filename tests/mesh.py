"""The tests' one mesh launcher: the mesh's services as real processes (``Mesh``), one by one
or together, for the end-to-end, observability, fuzz, chaos and netns tests; and ``conch up``
as a user runs it (``start_conch_up``)."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import psutil
import pytest
import redis
from redis.cluster import ClusterNode

from conch import envoy_edge
from conch.local_prometheus import binary as prometheus_binary
from conch.ports import free_port
from shared.runtime import redis_cluster
from tests.netns_lab import Lab
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
_SIGKILL = signal.SIGKILL  # in Mesh, ``signal`` names its method

# The mesh's services start in Triton's explicit model control mode with every model loaded at
# start: what the mesh did before the modes existed, and the tests use the repository API's load
# and unload. A test of another mode passes its own (``env_overrides`` or a ``start_*`` argument).
EXPLICIT_CONTROL = {
    "CONCH_WORKER_MODEL_CONTROL_MODE": "explicit",
    "CONCH_WORKER_LOAD_MODELS": "*",
    "CONCH_GATEWAY_MODEL_CONTROL_MODE": "explicit",
}

needs_prometheus = pytest.mark.skipif(
    prometheus_binary() is None,
    reason="needs the `prometheus` binary (Debian: apt-get install -y "
    "--no-install-recommends prometheus)",
)


def write_example_models(repository: Path, *models: str) -> Path:
    """Write the named example models (``examples/make_models.py``) into ``repository``."""
    names = [arg for model in models for arg in ("--model", model)]
    script = str(ROOT / "examples" / "make_models.py")
    subprocess.run(
        [sys.executable, script, str(repository), *names], check=True, capture_output=True
    )
    return repository


def start_conch_up(repository: Path, *args: str) -> subprocess.Popen[str]:
    """`conch up` as a user runs it: its own private Redis and a free gRPC port, output piped
    (stdout and stderr together) for the test to read."""
    env = {k: v for k, v in os.environ.items() if k != "CONCH_REDIS_URL"}
    argv = [sys.executable, "-m", "conch", "up", "--grpc-port", str(free_port())]
    return subprocess.Popen(
        [*argv, "--model-repository", str(repository), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


class ConchUpOutput:
    """Lines of a child's stdout, read on a thread (select() misses lines already buffered)."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(process,), daemon=True).start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if match := re.search(pattern, line):
                return match
        tail = "".join(self.seen[-40:])
        raise AssertionError(f"'{pattern}' not seen within {timeout_s} s:\n{tail}")


def stop_conch_up(
    process: subprocess.Popen[str], sig: signal.Signals = signal.SIGTERM
) -> list[psutil.Process]:
    """Stop `conch up` as a user would (SIGTERM, or SIGINT for Ctrl-C) and wait for it; returns
    the processes it had started that are still alive 10 s later (none, if it cleaned up)."""
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(sig)
    process.wait(timeout=60)
    _, alive = psutil.wait_procs(children, timeout=10)
    return alive


def sync_redis(url: str, **options: object) -> redis.Redis:
    """A synchronous client for a test's own look at Redis: one Redis or a cluster."""
    if url.startswith("redis+cluster"):
        nodes, parsed = redis_cluster.parse(url)
        return redis.RedisCluster(  # type: ignore[return-value]
            startup_nodes=[ClusterNode(h, p) for h, p in nodes], **parsed, **options
        )
    return redis.Redis.from_url(url, **options)  # type: ignore[arg-type]


def flush_database(url: str) -> None:
    """Start a test module from an empty Redis (the server is shared by the whole session)."""
    client = sync_redis(url)
    try:
        client.flushall()
    finally:
        client.close()


@dataclass
class Launch:
    """How a service of the mesh was started, so that ``Mesh.restart`` can start it again."""

    argv: list[str]
    env: dict[str, str]
    host: str | None = None
    restarts: int = 0


@dataclass
class Mesh:
    """The mesh's services as real processes, each in a session of its own (a signal reaches it
    and its children, a worker's model processes, and nothing else), stopped together.

    What each option is for:

    - ``redis_url``: the Redis every service uses: the session's server, a Redis Cluster
      (``redis+cluster://``), or a proxy in front of one (``tests.tcp_proxy``, the chaos suite);
    - ``repository``: the model repository the workers serve;
    - ``http_port``: the port ``start_gateway`` listens on by default (``url``); a second
      gateway on another port passes ``CONCH_GATEWAY_HTTP_PORT``;
    - ``log_dir``: where each service writes ``<name>.log`` (``log``, ``logs``; without it, the
      output is dropped);
    - ``env_overrides``: environment for every service (shorter bounds, tracing, ...); each
      ``start_*`` call takes its own on top, as keyword arguments;
    - ``log_format``: ``CONCH_LOG_FORMAT`` of every service (``json`` where logs are parsed);
    - ``lab``: network namespaces (``tests.netns_lab``); a ``start_*`` call with ``host=PART``
      runs its service in that part's namespace, and ``stop`` takes the lab down too.

    Any number of schedulers, workers and gateways: call ``start_*`` once for each, with its
    own ``name``. Faults: ``signal`` (SIGSTOP / SIGCONT ...), ``kill`` (SIGKILL by default) and
    ``restart`` (as ``conch up``'s supervisor restarts a service that died).

    As a context manager it stops everything on leaving.
    """

    redis_url: str
    repository: Path
    http_port: int = field(default_factory=free_port)
    log_dir: Path | None = None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    env_overrides: dict[str, str] = field(default_factory=dict)
    log_format: str = "text"
    lab: Lab | None = None
    launched: dict[str, Launch] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"localhost:{self.http_port}"

    def __enter__(self) -> Mesh:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- starting -----------------------------------------------------------------------------

    def _env(self, extra: dict[str, str]) -> dict[str, str]:
        return {
            **os.environ,
            **EXPLICIT_CONTROL,
            "CONCH_REDIS_URL": self.redis_url,
            "CONCH_LOG_FORMAT": self.log_format,
            "PYTHONUNBUFFERED": "1",
            **self.env_overrides,
            **extra,
        }

    def start_process(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, host: str | None = None
    ) -> subprocess.Popen[bytes]:
        """Any process as a service of the mesh (Redis, a proxy, Envoy, a gateway run its own
        way): started now, and again by ``restart``."""
        self.launched[name] = Launch(list(argv), dict(env or {}), host)
        return self._launch(name)

    def _launch(self, name: str) -> subprocess.Popen[bytes]:
        launch = self.launched[name]
        env = self._env(launch.env)
        if launch.host is not None:
            assert self.lab is not None, f"{name}: a host needs a lab"
            assert self.log_dir is not None
            process = self.lab.spawn(launch.host, launch.argv, env, self.log_dir / f"{name}.log")
        else:
            out: int | IO[bytes] = subprocess.DEVNULL
            if self.log_dir is not None:
                out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child's
            process = subprocess.Popen(
                launch.argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        self.processes[name] = process
        return process

    def start_scheduler(self, name: str = "scheduler", host: str | None = None, **env: str) -> None:
        self.start_process(
            name,
            [sys.executable, "-m", "scheduler"],
            {"CONCH_SCHEDULER_HEALTH_PORT": "0", **env},
            host,
        )

    def start_worker(
        self,
        name: str = "worker",
        backend: str = "onnxruntime",
        host: str | None = None,
        **env: str,
    ) -> None:
        self.start_process(
            name,
            [sys.executable, "-m", "workers", "--backend", backend],
            {
                "CONCH_WORKER_MODEL_REPOSITORY": str(self.repository),
                "CONCH_WORKER_HEALTH_PORT": "0",
                **env,
            },
            host,
        )

    def start_gateway(
        self, processes: int = 2, name: str = "gateway", host: str | None = None, **env: str
    ) -> None:
        self.start_process(
            name,
            [sys.executable, "-m", "gateway"],
            {
                "CONCH_GATEWAY_HOST": "127.0.0.1",
                "CONCH_GATEWAY_HTTP_PORT": str(self.http_port),
                "CONCH_GATEWAY_PROCESSES": str(processes),
                **env,
            },
            host,
        )

    def start_edge(self, plan: envoy_edge.EdgePlan, host: str | None = None) -> None:
        """The xDS control plane (``controlplane``) and Envoy (``envoy``) of an edge plan
        (``conch.envoy_edge.plan_edge``); ``wait_http`` on the plan's URLs sees them up."""
        self.start_process("controlplane", plan.controlplane.argv, plan.controlplane.env, host)
        self.start_process("envoy", plan.envoy.argv, plan.envoy.env, host)

    def start_all(self) -> Mesh:
        self.start_scheduler()
        self.start_worker()
        self.start_gateway()
        return self

    # --- waiting ------------------------------------------------------------------------------

    def raise_if_dead(self) -> None:
        """``RuntimeError`` with the logs if a service exited (a start-up wait gives up)."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {self.log(name)}")

    def wait_ready(
        self, models: list[str], timeout_s: float = 60.0, urls: list[str] | None = None
    ) -> Mesh:
        """Ready (``/v2/health/ready`` and each model's ready) on the gateway at ``url``, or
        on each of ``urls``; ``RuntimeError`` at once if a service exits meanwhile."""
        bases = urls or [f"http://{self.url}"]

        def ready() -> bool:
            self.raise_if_dead()
            try:
                return all(
                    httpx.get(f"{base}/v2/health/ready", timeout=1).status_code == 200
                    and all(
                        httpx.get(f"{base}/v2/models/{m}/ready", timeout=1).status_code == 200
                        for m in models
                    )
                    for base in bases
                )
            except httpx.HTTPError:
                return False

        wait_until(
            ready,
            timeout_s,
            every=0.2,
            failure=lambda: f"mesh not ready within {timeout_s} s: {self.logs()}",
        )
        return self

    def wait_http(self, url: str, timeout_s: float) -> None:
        """Until ``url`` answers 200 (an edge's control plane or Envoy)."""

        def answers() -> bool:
            self.raise_if_dead()
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url, timeout=1).status_code == 200
            return False

        wait_until(
            answers,
            timeout_s,
            every=0.1,
            failure=lambda: f"{url} not ready within {timeout_s} s: {self.logs()}",
        )

    # --- faults and stopping ------------------------------------------------------------------

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def signal(self, name: str, sig: signal.Signals) -> None:
        """``sig`` to the service's whole process group (a worker and its model processes)."""
        process = self.processes.get(name)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)

    def kill(self, name: str, sig: signal.Signals = _SIGKILL) -> None:
        """``sig`` to the service's process group, and wait for it to exit; it is no longer
        one of ``processes`` (``restart`` starts it again)."""
        process = self.processes.pop(name, None)
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def restart(self, name: str) -> None:
        """Start a service again as it was first started (after ``kill``, or a death)."""
        self.launched[name].restarts += 1
        self._launch(name)

    def dead_services(self) -> list[str]:
        """Services started here that are not running now (killed, or dead)."""
        return [
            name
            for name in self.launched
            if name not in self.processes or self.processes[name].poll() is not None
        ]

    def stop(self) -> None:
        """Every service, last started first: SIGCONT (a stopped one could not exit), SIGTERM,
        20 s to exit, then SIGKILL; then the lab, if any."""
        for name in reversed(list(self.processes)):
            self.signal(name, signal.SIGCONT)
            self.signal(name, signal.SIGTERM)
        for name in list(self.processes):
            process = self.processes.pop(name)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if self.lab is not None:
            self.lab.down()

    # --- logs ---------------------------------------------------------------------------------

    def log(self, name: str, chars: int = 3000) -> str:
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def logs(self, names: list[str] | None = None, chars: int = 3000) -> str:
        return "\n".join(f"--- {n}\n{self.log(n, chars)}" for n in names or list(self.launched))

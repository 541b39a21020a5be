"""Fixtures for the deploy tests: a private redis-server, the edge (control plane + Envoy)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import deploy_procs as procs
import manifests

from conch import envoy_edge
from conch.private_redis import PrivateRedis


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: starts real Envoy/Redis processes (seconds)")


@pytest.fixture(scope="session")
def deploy_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deploy")


@pytest.fixture(scope="session")
def edge_redis_url(deploy_tmp: Path) -> Iterator[str]:
    server = PrivateRedis(persistent_dir=str(deploy_tmp)).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def envoy_path() -> str:
    try:
        return envoy_edge.envoy_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def edge(edge_redis_url: str, deploy_tmp: Path, envoy_path: str) -> Iterator[procs.Edge]:
    """The control plane and Envoy as ``conch up --with-envoy`` would start them."""
    workdir = deploy_tmp / "edge"
    plan = envoy_edge.plan_edge(
        edge_redis_url,
        procs.free_port(),
        workdir=workdir,
        envoy_path=envoy_path,
        concurrency=1,
        # The tests watch a killed gateway's endpoint leave EDS; the default grace for a late
        # heartbeat (10 s, ``test_controlplane_logic``) would only make them wait longer.
        controlplane_env={"CONCH_CONTROLPLANE_GATEWAY_GRACE_S": str(procs.GATEWAY_GRACE_S)},
    )
    plane = procs.Proc("controlplane", plan.controlplane.argv, plan.controlplane.env, deploy_tmp)
    envoy = None
    try:
        procs.wait_http(plan.controlplane_health_url, 15, plane)
        envoy = procs.Proc("envoy", plan.envoy.argv, plan.envoy.env, deploy_tmp)
        procs.wait_http(plan.ready_url, 15, envoy)
        yield procs.Edge(plan, plane, envoy)
    finally:
        # Envoy first, so the control plane sees a clean end of the stream.
        if envoy is not None:
            envoy.stop()
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Each kustomization (base and overlays) rendered once per test session."""
    return {name: manifests.render(procs.ROOT / "k8s" / name) for name in manifests.RENDERS}


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path

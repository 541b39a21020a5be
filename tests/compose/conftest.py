"""The live `docker compose` stack, reached only through its published ports, as a user would.

`make compose-test` (scripts/compose-test.sh) builds the images, starts the stack with
`docker compose --profile cpu up -d --wait`, sets CONCH_COMPOSE_STACK=1 and runs this folder;
without that variable every test here is skipped (`make test` collects the folder too).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = os.environ.get("COMPOSE_PROJECT_NAME", "conch")
PROFILES = os.environ.get("CONCH_COMPOSE_PROFILES", "cpu").split(",")
HTTP = f"localhost:{os.environ.get('CONCH_HTTP_PORT', '8080')}"
GRPC = f"localhost:{os.environ.get('CONCH_GRPC_PORT', '8081')}"
PROMETHEUS = f"http://localhost:{os.environ.get('CONCH_PROMETHEUS_PORT', '9090')}"
ADMIN_TOKEN = os.environ.get("CONCH_ADMIN_TOKEN", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CONCH_COMPOSE_STACK") == "1":
        return
    skip = pytest.mark.skip(reason="needs the live compose stack: make compose-test")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


def compose(*args: str, check: bool = True, timeout: float = 300) -> str:
    """`docker compose --profile <p> ARGS` in the repository root; its stdout."""
    command = ["docker", "compose", "-p", PROJECT]
    for profile in PROFILES:
        command += ["--profile", profile]
    result = subprocess.run(
        [*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"docker compose {' '.join(args)}: {result.stderr}")
    return result.stdout


def containers(service: str) -> list[str]:
    """The ids of a service's running containers."""
    return compose("ps", "-q", service).split()


def inspect(container: str) -> dict[str, Any]:
    out = subprocess.run(
        ["docker", "inspect", container], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)[0]  # type: ignore[no-any-return]


def http_json(url: str, body: Any = None, method: str | None = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if ADMIN_TOKEN:
        request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read()
    return json.loads(text) if text else None


def wait_for(what: str, check: Callable[[], bool], timeout: float = 120, pause: float = 1) -> None:
    """``tests/waiting.wait_until`` for a check that may raise while the stack is not there yet
    (a refused connection, a 503): such a look counts as not yet, and the last error is shown
    if time runs out."""
    errors: list[BaseException] = []

    def ready() -> bool:
        try:
            return bool(check())
        except Exception as exc:
            errors.append(exc)
            return False

    wait_until(
        ready,
        timeout,
        every=pause,
        failure=lambda: f"timed out waiting for {what} (last error: {errors[-1:]!r})",
    )


def stack_ready() -> bool:
    with urllib.request.urlopen(f"http://{HTTP}/v2/health/ready", timeout=3) as response:
        return response.status == 200


def all_healthy() -> bool:
    """Every running container of the project reports healthy."""
    ids = compose("ps", "-q").split()
    return bool(ids) and all(
        inspect(c)["State"].get("Health", {}).get("Status", "healthy") == "healthy" for c in ids
    )


@pytest.fixture(scope="session")
def http_url() -> str:
    wait_for("the stack to be ready through Envoy", stack_ready, timeout=180)
    return HTTP


@pytest.fixture(scope="session")
def grpc_url(http_url: str) -> str:
    """Envoy's gRPC port, once a gateway's gRPC endpoint passed Envoy's health check."""
    import tritonclient.grpc as grpcclient

    def ready() -> bool:
        with grpcclient.InferenceServerClient(GRPC) as client:
            return bool(client.is_server_ready())

    wait_for("the stack to be ready over gRPC through Envoy", ready, timeout=60)
    return GRPC


@pytest.fixture(scope="session")
def prometheus_url() -> str:
    return PROMETHEUS


def subprocess_run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def running_sums(client: Any, module: Any, values: list[int], sequence_id: int) -> list[int]:
    """The answers of one sequence of ``sequence_accumulator``, sent a step at a time with a
    tritonclient ``client`` of either protocol (``module``: tritonclient.http or .grpc)."""
    outs = []
    for i, value in enumerate(values):
        step = module.InferInput("INPUT", [1, 1], "INT32")
        step.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = client.infer(
            "sequence_accumulator",
            [step],
            sequence_id=sequence_id,
            sequence_start=i == 0,
            sequence_end=i == len(values) - 1,
        )
        outs.append(int(result.as_numpy("OUTPUT")[0][0]))
    return outs

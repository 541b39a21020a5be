"""Triton's model control modes, several repositories and --model-config-name, end to end with
tritonclient over HTTP and gRPC (issue 27).

- ``none`` (Triton's default): every model of every repository loads; load and unload are refused
  with Triton's error (UNAVAILABLE, HTTP 503); a model name in two repositories is UNAVAILABLE in
  the index with Triton's reason while the others serve; ``--model-config-name`` picks
  ``configs/<name>.pbtxt``.
- ``explicit``: only ``--load-model`` loads at start, strict readiness does not wait for the rest,
  load and unload work, a worker started later loads what the fleet loaded, and loading an
  ensemble loads the models its steps use.
- ``poll``: an added model (and ensemble) loads, a new version directory replaces the old
  version, another configuration is reloaded, a removed model (and ensemble) unloads, within a
  few poll periods, while requests to the models that stay (the changed one included) see no
  error.
"""

from __future__ import annotations

import shutil
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from shared.fleet.control import NOT_EXPLICIT
from tests.mesh import Mesh, flush_database
from tests.waiting import eventually_sync, until_sync

pytestmark = pytest.mark.e2e

POLL_SECS = 0.5
CHANGE_S = 30.0  # a change is picked up within a few poll periods; generous for a busy machine


def copy_model(source: Path, repo: Path, name: str, config_extra: str = "") -> Path:
    """The example ``simple`` model (two INT32[16] inputs, their sum and difference) under
    another name; written beside the repository's models and renamed in, as a deployment does,
    so a poll never sees half a model."""
    staging = repo / f".staging-{name}"
    shutil.copytree(source / "simple", staging)
    config = (staging / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    (staging / "config.pbtxt").write_text(config + config_extra)
    target = repo / name
    staging.rename(target)
    return target


def add_version(model_dir: Path, version: int) -> None:
    staging = model_dir / f".staging-{version}"
    shutil.copytree(model_dir / "1", staging)
    staging.rename(model_dir / str(version))


def infer(client: httpclient.InferenceServerClient, model: str) -> list[list[int]]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    result = client.infer(model, inputs)
    output = result.as_numpy("OUTPUT0")
    assert output is not None
    return [[int(x) for x in row] for row in output]


PAIR_ENSEMBLE = """
name: "pair"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "third"
      model_version: -1
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "SUM" }
    }
  ]
}
"""


def index(url: str) -> dict[tuple[str, str], dict[str, str]]:
    """The repository index by (name, version)."""
    entries = httpx.post(f"http://{url}/v2/repository/index", json={}, timeout=5).json()
    return {(e["name"], e.get("version", "")): e for e in entries}


def states(url: str, name: str) -> dict[str, str]:
    """Version -> state of one model in the index."""
    return {v: e["state"] for (n, v), e in index(url).items() if n == name}


def server_ready(url: str) -> bool:
    return httpx.get(f"http://{url}/v2/health/ready", timeout=5).status_code == 200


@dataclass
class Running:
    mesh: Mesh
    grpc_url: str
    repos: list[Path] = field(default_factory=list)
    # Where the example ``simple`` model is, to copy into a repository while the mesh runs.
    source: Path | None = None

    def http(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.mesh.url)

    def grpc(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)


def start_mesh(
    redis_url: str, repos: list[Path], logs: Path, mode: str, **worker_env: str
) -> Running:
    """Scheduler, ONNX Runtime worker and one gateway (HTTP and gRPC) in ``mode``."""
    flush_database(redis_url)
    grpc_port = free_port()
    mesh = Mesh(redis_url, repos[0], log_dir=logs)
    mesh.start_scheduler()
    mesh.start_worker(
        CONCH_WORKER_MODEL_REPOSITORY=",".join(str(r) for r in repos),
        CONCH_WORKER_MODEL_CONTROL_MODE=mode,
        **worker_env,
    )
    mesh.start_gateway(
        1,
        CONCH_GATEWAY_GRPC_PORT=str(grpc_port),
        CONCH_GATEWAY_MODEL_CONTROL_MODE=mode,
        CONCH_GATEWAY_REPOSITORY_REQUIRES_ADMIN="false",
    )
    return Running(mesh, f"127.0.0.1:{grpc_port}", repos)


# --- none: several repositories, a duplicate, --model-config-name ------------------------------


@pytest.fixture(scope="class")
def none_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    first, second = tmp_path_factory.mktemp("repo_a"), tmp_path_factory.mktemp("repo_b")
    simple = copy_model(model_repository, first, "simple_a")
    (simple / "configs").mkdir()
    alternative = (
        (simple / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 4")
    )
    (simple / "configs" / "small.pbtxt").write_text(alternative)
    copy_model(model_repository, second, "simple_b")
    copy_model(model_repository, first, "twice")
    copy_model(model_repository, second, "twice")
    running = start_mesh(
        redis_server.url,
        [first, second],
        tmp_path_factory.mktemp("none_logs"),
        "none",
        CONCH_WORKER_MODEL_CONFIG_NAME="small",
    )
    try:
        running.mesh.wait_ready(["simple_a", "simple_b"], timeout_s=120)
        yield running
    finally:
        running.mesh.stop()


class TestNone:
    """One mesh in mode none, over two repositories (the class's fixture stops it after)."""

    def test_none_refuses_load_and_unload_with_tritons_error(self, none_mesh: Running) -> None:
        for call in (none_mesh.http().load_model, none_mesh.http().unload_model):
            with pytest.raises(InferenceServerException) as refused:
                call("simple_a")
            assert refused.value.message() == NOT_EXPLICIT
            assert refused.value.status() == "503"
        for call in (none_mesh.grpc().load_model, none_mesh.grpc().unload_model):
            with pytest.raises(InferenceServerException) as refused:
                call("simple_a")
            assert refused.value.message() == NOT_EXPLICIT
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert none_mesh.http().is_model_ready("simple_a")  # nothing was unloaded

    def test_models_of_both_repositories_serve_and_a_duplicate_is_unavailable(
        self,
        none_mesh: Running,
    ) -> None:
        client = none_mesh.http()
        for model in ("simple_a", "simple_b"):
            assert infer(client, model) == [list(range(1, 17))]
        found = index(none_mesh.mesh.url)
        assert found[("simple_a", "1")]["state"] == "READY"
        assert found[("simple_b", "1")]["state"] == "READY"
        twice = found[("twice", "")]
        assert twice["state"] == "UNAVAILABLE"
        assert "not unique across all model repositories" in twice["reason"]
        assert server_ready(none_mesh.mesh.url)  # strict readiness does not wait for it
        grpc_index = none_mesh.grpc().get_model_repository_index()
        assert {m.name: m.state for m in grpc_index.models}["twice"] == "UNAVAILABLE"

    def test_the_model_config_name_picks_the_alternative_configuration(
        self, none_mesh: Running
    ) -> None:
        client = none_mesh.http()
        assert client.get_model_config("simple_a")["max_batch_size"] == 4  # configs/small.pbtxt
        assert client.get_model_config("simple_b")["max_batch_size"] == 8  # no alternative: config
        assert none_mesh.grpc().get_model_config("simple_a").config.max_batch_size == 4


# --- explicit -----------------------------------------------------------------------------------


@pytest.fixture(scope="class")
def explicit_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    repo = tmp_path_factory.mktemp("explicit_repo")
    for name in ("first", "second", "third"):
        copy_model(model_repository, repo, name)
    (repo / "pair" / "1").mkdir(parents=True)  # an ensemble over 'third'
    (repo / "pair" / "config.pbtxt").write_text(PAIR_ENSEMBLE)
    running = start_mesh(
        redis_server.url,
        [repo],
        tmp_path_factory.mktemp("explicit_logs"),
        "explicit",
        CONCH_WORKER_LOAD_MODELS="first,nowhere",
    )
    try:
        running.mesh.wait_ready(["first"], timeout_s=120)
        yield running
    finally:
        running.mesh.stop()


class TestExplicit:
    """One mesh in explicit mode, LOAD_MODELS=first,nowhere."""

    def test_explicit_loads_only_the_named_models_at_start(self, explicit_mesh: Running) -> None:
        url = explicit_mesh.mesh.url
        assert server_ready(url)  # strict readiness waits for 'first' only
        assert states(url, "first") == {"1": "READY"}
        for name in ("second", "third"):
            entry = index(url)[(name, "1")]
            assert entry["state"] == "UNAVAILABLE" and entry["reason"] == "not loaded"
            assert not explicit_mesh.http().is_model_ready(name)
        nowhere = index(url)[("nowhere", "")]  # a --load-model no repository holds
        assert nowhere["state"] == "UNAVAILABLE" and "no model directory" in nowhere["reason"]

    def test_explicit_loads_and_unloads_through_the_api(self, explicit_mesh: Running) -> None:
        url = explicit_mesh.mesh.url
        explicit_mesh.http().load_model("second")
        assert explicit_mesh.http().is_model_ready("second")
        assert infer(explicit_mesh.http(), "second") == [list(range(1, 17))]
        explicit_mesh.grpc().unload_model("first")
        assert until_sync(lambda: not explicit_mesh.http().is_model_ready("first"), 10)
        entry = index(url)[("first", "1")]
        assert entry["state"] == "UNAVAILABLE" and entry["reason"] == "unloaded"
        assert states(url, "second") == {"1": "READY"}
        assert until_sync(lambda: server_ready(url), 10)  # an unloaded model is not waited for

        # A worker started later loads what the fleet loaded, not what --load-model says.
        explicit_mesh.mesh.kill("worker", signal.SIGTERM)  # a clean stop unmarks its versions
        assert until_sync(lambda: not explicit_mesh.http().is_model_ready("second"), 10)
        explicit_mesh.mesh.restart("worker")
        explicit_mesh.mesh.wait_ready(["second"], timeout_s=120)
        assert not explicit_mesh.http().is_model_ready("first")
        assert index(url)[("third", "1")]["reason"] == "not loaded"

    def test_loading_an_ensemble_loads_the_models_its_steps_use(
        self, explicit_mesh: Running
    ) -> None:
        client = explicit_mesh.http()
        assert not client.is_model_ready("third")
        client.load_model("pair")
        assert until_sync(lambda: client.is_model_ready("pair"), 30)
        assert client.is_model_ready("third")
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("A", "B")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        total = client.infer("pair", inputs).as_numpy("SUM")
        assert total is not None and total.tolist() == [[2 * x for x in range(16)]]


# --- poll ---------------------------------------------------------------------------------------


class RequestLoop:
    """Requests to some models, one after another on a thread, counting the errors."""

    def __init__(self, url: str, models: list[str]):
        self.url, self.models = url, models
        self.done = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RequestLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        client = httpclient.InferenceServerClient(self.url)
        while not self._stop.is_set():
            for model in self.models:
                try:
                    infer(client, model)
                    self.done += 1
                except Exception as exc:
                    self.errors.append(f"{model}: {exc}")


@pytest.fixture(scope="class")
def poll_mesh(
    redis_server: PrivateRedis, model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    repo = tmp_path_factory.mktemp("poll_repo")
    for name in ("stays", "grows", "goes"):
        copy_model(model_repository, repo, name)
    running = start_mesh(
        redis_server.url,
        [repo],
        tmp_path_factory.mktemp("poll_logs"),
        "poll",
        CONCH_WORKER_REPOSITORY_POLL_SECS=str(POLL_SECS),
    )
    running.source = model_repository
    try:
        running.mesh.wait_ready(["stays", "grows", "goes"], timeout_s=120)
        yield running
    finally:
        running.mesh.stop()


class TestPoll:
    """One mesh in poll mode."""

    def test_poll_refuses_load_and_unload(self, poll_mesh: Running) -> None:
        with pytest.raises(InferenceServerException) as refused:
            poll_mesh.http().load_model("stays")
        assert refused.value.message() == NOT_EXPLICIT and refused.value.status() == "503"

    def test_poll_follows_the_repository_without_failing_a_request(
        self, poll_mesh: Running
    ) -> None:
        url, repo, source = poll_mesh.mesh.url, poll_mesh.repos[0], poll_mesh.source
        assert source is not None
        with RequestLoop(url, ["stays", "grows"]) as loop:
            assert until_sync(lambda: loop.done > 10, 10), loop.errors

            copy_model(source, repo, "added")
            added = eventually_sync(
                lambda: states(url, "added"), lambda s: s == {"1": "READY"}, CHANGE_S
            )
            assert added == {"1": "READY"}, poll_mesh.mesh.logs(["worker"])

            staging = repo / ".staging-pair"  # an ensemble over a model that stays
            (staging / "1").mkdir(parents=True)
            ensemble = PAIR_ENSEMBLE.replace('"pair"', '"pair_poll"').replace('"third"', '"stays"')
            (staging / "config.pbtxt").write_text(ensemble)
            staging.rename(repo / "pair_poll")
            client = poll_mesh.http()
            assert until_sync(lambda: client.is_model_ready("pair_poll"), CHANGE_S)

            add_version(repo / "grows", 2)  # version_policy latest 1: 2 replaces 1
            grown = eventually_sync(
                lambda: states(url, "grows"),
                lambda s: s.get("2") == "READY" and s.get("1") != "READY",
                CHANGE_S,
            )
            assert grown.get("2") == "READY" and grown.get("1") != "READY", grown

            config = repo / "grows" / "config.pbtxt"  # another configuration: reloaded in place
            staged = repo / "grows" / ".config.pbtxt"
            staged.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
            staged.replace(config)
            batch = eventually_sync(
                lambda: client.get_model_config("grows")["max_batch_size"],
                lambda b: b == 4,
                CHANGE_S,
            )
            assert batch == 4

            shutil.rmtree(repo / "goes")
            shutil.rmtree(repo / "pair_poll")
            gone = eventually_sync(
                lambda: states(url, "goes"), lambda s: "READY" not in s.values(), CHANGE_S
            )
            assert "READY" not in gone.values(), gone
            done_before = loop.done
            assert until_sync(lambda: loop.done > done_before + 10, 10)
        assert loop.errors == [], loop.errors[:5]
        assert not poll_mesh.http().is_model_ready("goes")
        assert until_sync(lambda: not poll_mesh.http().is_model_ready("pair_poll"), CHANGE_S)
        assert poll_mesh.http().get_model_metadata("grows")["versions"] == ["2"]
        assert until_sync(lambda: server_ready(url), 10)  # the removed model is not waited for

"""A mesh serving its models from S3 (issue 27): the workers' repository is a bucket of a real
S3-compatible server (moto's, ``tests/s3_server.py``) named in Triton's ``s3://host:port/...``
form, read through a local copy, and followed by ``--model-control-mode poll``: a new version
uploaded to the bucket is served, an added model loads and a removed one unloads, each within a
few polls, while ``tritonclient`` asks as a Triton user would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database
from tests.s3_server import S3Server
from tests.waiting import eventually_sync

pytestmark = pytest.mark.e2e

BUCKET = "conch-models"
PREFIX = "triton/repository"
CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
# OUTPUT0 is INPUT0 plus an offset that each version (and each test) writes in.
MODEL_PY = """\
import triton_python_backend_utils as pb_utils

OFFSET = {offset}


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "OUTPUT0",
                        pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy() + OFFSET,
                    )
                ]
            )
            for request in requests
        ]
"""
POLL_S = 1.0
# Enough polls for a download, a scan and a Python model's load on a loaded 2-core machine.
PICKED_UP_WITHIN_S = 60.0


def _put_model(s3: Any, name: str, version: int, offset: int) -> None:
    s3.put_object(
        Bucket=BUCKET, Key=f"{PREFIX}/{name}/config.pbtxt", Body=CONFIG.format(name=name).encode()
    )
    s3.put_object(
        Bucket=BUCKET,
        Key=f"{PREFIX}/{name}/{version}/model.py",
        Body=MODEL_PY.format(offset=offset).encode(),
    )


def _delete_model(s3: Any, name: str) -> None:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{name}/")
    for item in listed.get("Contents", []):
        s3.delete_object(Bucket=BUCKET, Key=item["Key"])


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def s3(s3_server: S3Server) -> Any:
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    _put_model(client, "s3_offset", 1, 100)
    return client


@pytest.fixture(scope="module")
def s3_mesh(
    redis_server: PrivateRedis,
    s3_server: S3Server,
    s3: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Mesh]:
    flush_database(redis_server.url)
    home = tmp_path_factory.mktemp("aws")  # no ~/.aws of the machine's: the server's keys only
    aws = {
        **s3_server.env,
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    location = f"s3://{s3_server.hostport}/{BUCKET}/{PREFIX}"
    with Mesh(
        redis_server.url,
        Path(tmp_path_factory.mktemp("unused_local_repository")),
        log_dir=tmp_path_factory.mktemp("logs"),
    ) as mesh:
        mesh.start_scheduler()
        mesh.start_worker(
            "worker-py",
            backend="python",
            CONCH_WORKER_MODEL_REPOSITORY=location,
            CONCH_WORKER_REPOSITORY_CACHE_DIR=str(tmp_path_factory.mktemp("s3_copies")),
            CONCH_WORKER_MODEL_CONTROL_MODE="poll",
            CONCH_WORKER_REPOSITORY_POLL_SECS=str(POLL_S),
            **aws,
        )
        mesh.start_gateway(processes=1, CONCH_GATEWAY_MODEL_CONTROL_MODE="poll")
        yield mesh.wait_ready(["s3_offset"], timeout_s=120)


def _infer(mesh: Mesh, model: str, values: list[int]) -> list[int] | str:
    """OUTPUT0 for INPUT0 = ``values`` (a batch of one-element rows), or the error's text."""
    client = httpclient.InferenceServerClient(mesh.url)
    data = np.array(values, dtype=np.int32).reshape(-1, 1)
    tensor = httpclient.InferInput("INPUT0", list(data.shape), "INT32")
    tensor.set_data_from_numpy(data)
    try:
        result = client.infer(model, [tensor])
    except InferenceServerException as exc:
        return str(exc)
    finally:
        client.close()
    return [int(v) for v in result.as_numpy("OUTPUT0").reshape(-1)]


def _ready(mesh: Mesh, model: str) -> bool:
    client = httpclient.InferenceServerClient(mesh.url)
    try:
        with contextlib.suppress(InferenceServerException):
            return bool(client.is_model_ready(model))
        return False
    finally:
        client.close()


def test_a_model_in_the_bucket_is_served(s3_mesh: Mesh) -> None:
    assert _infer(s3_mesh, "s3_offset", [1, 2, 3]) == [101, 102, 103]
    client = httpclient.InferenceServerClient(s3_mesh.url)
    try:
        metadata = client.get_model_metadata("s3_offset")
    finally:
        client.close()
    assert metadata["name"] == "s3_offset"
    assert metadata["versions"] == ["1"]


def test_a_new_version_uploaded_to_the_bucket_is_served_after_a_poll(
    s3_mesh: Mesh, s3: Any
) -> None:
    """The default version policy (latest 1): version 2 replaces version 1."""
    assert _infer(s3_mesh, "s3_offset", [5]) == [105]
    _put_model(s3, "s3_offset", 2, 200)
    answer = eventually_sync(
        lambda: _infer(s3_mesh, "s3_offset", [5]),
        lambda value: value == [205],
        within=PICKED_UP_WITHIN_S,
        every=0.25,
    )
    assert answer == [205], f"version 2 not served: {answer}\n{s3_mesh.logs()}"
    assert _infer(s3_mesh, "s3_offset", [5, 6]) == [205, 206]


def test_a_changed_model_file_in_the_bucket_is_reloaded(s3_mesh: Mesh, s3: Any) -> None:
    """The same version rewritten in place (Triton's poll reloads a changed model)."""
    _put_model(s3, "s3_inplace", 1, 1000)
    assert eventually_sync(
        lambda: _infer(s3_mesh, "s3_inplace", [1]),
        lambda value: value == [1001],
        within=PICKED_UP_WITHIN_S,
        every=0.25,
    ) == [1001], s3_mesh.logs()
    _put_model(s3, "s3_inplace", 1, 2000)
    answer = eventually_sync(
        lambda: _infer(s3_mesh, "s3_inplace", [1]),
        lambda value: value == [2001],
        within=PICKED_UP_WITHIN_S,
        every=0.25,
    )
    assert answer == [2001], f"the rewritten model.py not served: {answer}\n{s3_mesh.logs()}"


def test_a_model_added_to_the_bucket_loads_and_one_removed_unloads(s3_mesh: Mesh, s3: Any) -> None:
    _put_model(s3, "s3_added", 1, 7)
    answer = eventually_sync(
        lambda: _infer(s3_mesh, "s3_added", [1]),
        lambda value: value == [8],
        within=PICKED_UP_WITHIN_S,
        every=0.25,
    )
    assert answer == [8], f"the added model not served: {answer}\n{s3_mesh.logs()}"
    _delete_model(s3, "s3_added")
    gone = eventually_sync(
        lambda: _ready(s3_mesh, "s3_added"),
        lambda ready: not ready,
        within=PICKED_UP_WITHIN_S,
        every=0.25,
    )
    assert not gone, f"the removed model is still ready\n{s3_mesh.logs()}"
    assert _ready(s3_mesh, "s3_offset"), "a model that stayed in the bucket was unloaded"

"""`conch up --model-repository=s3://...` reads its bucket before it starts anything (issue 27).

The scan that decides which backends' workers start and which models `conch up` waits for goes
through a local copy of the bucket, on a real S3-compatible server (moto's); a local repository
beside it takes part in Triton's rule for a name found in two.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from conch import service_env, up_plan
from conch.arguments import parser
from conch.up_args import resolve
from tests.s3_server import S3Server, upload_tree

BUCKET = "conch-up-models"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def bucket(
    s3_server: S3Server, model_repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """`simple` and `mlp` under a prefix of the bucket; the process reads the server's keys."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = s3_server.client()
    client.create_bucket(Bucket=BUCKET)
    for name in ("simple", "mlp"):
        upload_tree(client, BUCKET, f"repo/{name}", model_repository / name)
    return f"s3://{s3_server.hostport}/{BUCKET}/repo"


def _args(*argv: str) -> argparse.Namespace:
    args = parser().parse_args(["up", *argv])
    resolve(args)
    return args


def test_conch_up_scans_a_bucket_through_a_local_copy(bucket: str, tmp_path: Path) -> None:
    args = _args(f"--model-repository={bucket}", "--model-control-mode=poll")
    plan = up_plan.plan_models(args, tmp_path / "copies")
    assert plan.wait_for == ["mlp", "simple"] and plan.failed == {}
    assert set(plan.by_backend) == {"onnxruntime"}
    copies = list((tmp_path / "copies").iterdir())
    assert len(copies) == 1 and (copies[0] / "simple" / "config.pbtxt").is_file()
    env = service_env.worker_env(args)
    assert env["CONCH_WORKER_MODEL_REPOSITORY"] == bucket


def test_a_name_in_the_bucket_and_a_local_repository_is_served_from_neither(
    bucket: str, model_repository: Path, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    (local / "simple").symlink_to(model_repository / "simple")
    args = _args(f"--model-repository={bucket}", f"--model-repository={local}")
    plan = up_plan.plan_models(args, tmp_path / "copies")
    assert plan.wait_for == ["mlp"]
    assert "not unique across all model repositories" in plan.failed["simple"]

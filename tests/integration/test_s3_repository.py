"""Model repositories on S3-compatible storage (issue 27), against a real S3 server: moto's
standalone server on loopback (``tests/s3_server.py``), through boto3 as a user's deployment
would reach MinIO or AWS.

A remote repository is read through a local copy: ``remote.sync`` makes the copy match the
bucket (new and changed objects downloaded, removed ones deleted, the rest untouched, times
included), and ``Repositories`` scans and fingerprints the copy like any local repository.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conch.ports import free_port
from shared.storage import remote
from shared.storage.repositories import Repositories
from shared.storage.s3_client import Limits
from shared.wire.errors import ConchError, ErrorCode
from tests.s3_server import S3Server, upload_tree

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""
MODEL_PY = "# version {version} of {name}\nclass TritonPythonModel:\n    pass\n"
# Short bounds for the tests that wait for a dead or silent server on purpose.
QUICK = Limits(connect_timeout_s=0.5, read_timeout_s=0.5, attempts=2)


def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]) -> None:
    """Only ``env`` tells boto3 anything: no ~/.aws, no endpoint, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    with S3Server() as server:
        yield server


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    _isolated(monkeypatch, tmp_path, s3_server.env)
    return s3_server.client()


@pytest.fixture
def bucket(s3: Any, request: pytest.FixtureRequest) -> str:
    """A new bucket per test, named after it."""
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:50]
    name = name.strip("-") + f"-{free_port()}"
    s3.create_bucket(Bucket=name)
    return name


def _models(root: Path) -> Path:
    """Two models: ``alpha`` with version 1, ``beta`` with versions 1 and 2."""
    for name, versions in (("alpha", [1]), ("beta", [1, 2])):
        (root / name).mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        for version in versions:
            (root / name / str(version)).mkdir()
            (root / name / str(version) / "model.py").write_text(
                MODEL_PY.format(version=version, name=name)
            )
    return root


def _files(root: Path) -> dict[str, bytes]:
    """The copy's model files (not its own bookkeeping, whose names start with a dot)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.relative_to(root).as_posix().startswith(".")
    }


def _stats(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        name: ((s := (root / name).stat()).st_ino, s.st_size, s.st_mtime_ns)
        for name in _files(root)
    }


@pytest.fixture
def filled(s3: Any, bucket: str, s3_server: S3Server, tmp_path: Path) -> remote.RemoteRepository:
    """The two models under ``models/`` of the bucket, named in Triton's host:port form."""
    upload_tree(s3, bucket, "models", _models(tmp_path / "source"))
    found = remote.parse(f"s3://{s3_server.hostport}/{bucket}/models")
    assert found is not None
    return found


def test_a_repository_of_two_models_is_copied_whole(
    filled: remote.RemoteRepository, s3: Any, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    remote.sync(filled, copy)
    assert _files(copy) == _files(tmp_path / "source")
    assert (copy / remote.MANIFEST).is_file()
    listed = s3.head_object(Bucket=filled.bucket, Key="models/beta/2/model.py")
    # The file's time is the object's (LastModified, to the second).
    assert int((copy / "beta/2/model.py").stat().st_mtime) == int(
        listed["LastModified"].timestamp()
    )
    assert set(Repositories([filled.location], tmp_path / "cache").scan().models) == set()
    repositories = Repositories([filled.location], tmp_path / "cache")
    repositories.refresh()
    result = repositories.scan()
    assert result.errors == {}
    assert sorted(result.models) == ["alpha", "beta"]
    assert result.models["beta"].available_versions == [1, 2]


def test_a_changed_object_is_downloaded_again_and_the_unchanged_files_are_left_alone(
    filled: remote.RemoteRepository, s3: Any, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    remote.sync(filled, copy)
    before = _stats(copy)
    remote.sync(filled, copy)
    assert _stats(copy) == before, "a sync with nothing changed rewrote files"
    # The same size as the old content, and likely within the same second: still seen.
    old = (copy / "beta/1/model.py").read_bytes()
    new = old.replace(b"version 1", b"version 9")
    assert len(new) == len(old) and new != old
    s3.put_object(Bucket=filled.bucket, Key="models/beta/1/model.py", Body=new)
    remote.sync(filled, copy)
    after = _stats(copy)
    assert (copy / "beta/1/model.py").read_bytes() == new
    assert after["beta/1/model.py"][2] != before["beta/1/model.py"][2]
    unchanged = {k: v for k, v in after.items() if k != "beta/1/model.py"}
    assert unchanged == {k: v for k, v in before.items() if k != "beta/1/model.py"}


def test_a_removed_object_is_deleted_from_the_copy_with_the_directories_it_leaves_empty(
    filled: remote.RemoteRepository, s3: Any, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    remote.sync(filled, copy)
    s3.delete_object(Bucket=filled.bucket, Key="models/beta/2/model.py")
    for key in ("models/alpha/config.pbtxt", "models/alpha/1/model.py"):
        s3.delete_object(Bucket=filled.bucket, Key=key)
    remote.sync(filled, copy)
    assert sorted(_files(copy)) == ["beta/1/model.py", "beta/config.pbtxt"]
    assert not (copy / "beta/2").exists()
    assert not (copy / "alpha").exists()


def test_a_file_the_copy_did_not_download_is_not_deleted(
    filled: remote.RemoteRepository, tmp_path: Path
) -> None:
    """A model written into the copy by a load request (the repository API's files) is not
    the bucket's to take away."""
    copy = tmp_path / "copy"
    remote.sync(filled, copy)
    (copy / "uploaded/1").mkdir(parents=True)
    (copy / "uploaded/1/model.py").write_text("uploaded")
    remote.sync(filled, copy)
    assert (copy / "uploaded/1/model.py").read_text() == "uploaded"


def test_a_model_sync_touches_that_model_only(
    filled: remote.RemoteRepository, s3: Any, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    remote.sync(filled, copy)
    before = _stats(copy)
    for name in ("alpha", "beta"):
        s3.put_object(Bucket=filled.bucket, Key=f"models/{name}/1/model.py", Body=b"changed")
    remote.sync(filled, copy, model="alpha")
    assert (copy / "alpha/1/model.py").read_bytes() == b"changed"
    assert _stats(copy)["beta/1/model.py"] == before["beta/1/model.py"]
    # A model another repository may hold: nothing to copy here, and no error.
    remote.sync(filled, copy, model="gamma")
    assert not (copy / "gamma").exists()
    # A model gone from the bucket: its copy goes with it; the others stay.
    for key in ("models/alpha/config.pbtxt", "models/alpha/1/model.py"):
        s3.delete_object(Bucket=filled.bucket, Key=key)
    remote.sync(filled, copy, model="alpha")
    assert not (copy / "alpha").exists()
    assert (copy / "beta/config.pbtxt").is_file()
    with pytest.raises(ConchError, match=re.escape("model name '../beta'")):
        remote.sync(filled, copy, model="../beta")


@pytest.mark.parametrize("form", ["host:port", "http://", "AWS_ENDPOINT_URL", "_S3", "no prefix"])
def test_every_location_form_reaches_the_server(
    form: str,
    s3: Any,
    bucket: str,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = "" if form == "no prefix" else "deep/er/prefix"
    upload_tree(s3, bucket, prefix, _models(tmp_path / "source"))
    location = {
        "host:port": f"s3://{s3_server.hostport}/{bucket}/{prefix}",
        "http://": f"s3://http://{s3_server.hostport}/{bucket}/{prefix}/",
        "AWS_ENDPOINT_URL": f"s3://{bucket}/{prefix}",
        "_S3": f"s3://{bucket}/{prefix}",
        "no prefix": f"s3://{s3_server.hostport}/{bucket}",
    }[form]
    if form == "AWS_ENDPOINT_URL":
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    if form == "_S3":  # the S3-only variable wins over the general one
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_server.endpoint)
    repositories = Repositories([location], tmp_path / "cache")
    repositories.refresh()
    assert sorted(repositories.scan().models) == ["alpha", "beta"]
    assert _files(repositories.paths[0]) == _files(tmp_path / "source")


def test_the_https_form_reaches_a_server_whose_certificate_aws_ca_bundle_trusts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with S3Server(tls_dir=tmp_path) as server:
        _isolated(monkeypatch, tmp_path, server.env)
        s3 = server.client()
        s3.create_bucket(Bucket="secure")
        upload_tree(s3, "secure", "models", _models(tmp_path / "source"))
        repository = remote.parse(f"s3://https://{server.hostport}/secure/models")
        assert repository is not None
        assert repository.endpoint == server.endpoint
        with pytest.raises(ConchError) as raised:  # the server's CA is not trusted yet
            remote.sync(repository, tmp_path / "copy", limits=QUICK)
        assert raised.value.code == ErrorCode.UNAVAILABLE
        assert "TLS handshake failed" in raised.value.message
        assert "AWS_CA_BUNDLE" in raised.value.message
        assert server.ca_bundle is not None
        monkeypatch.setenv("AWS_CA_BUNDLE", server.ca_bundle)
        remote.sync(repository, tmp_path / "copy")
        assert _files(tmp_path / "copy") == _files(tmp_path / "source")


def test_fingerprints_change_with_the_bucket_for_the_changed_model_only(
    filled: remote.RemoteRepository, s3: Any, tmp_path: Path
) -> None:
    repositories = Repositories([filled.location], tmp_path / "cache")
    repositories.refresh()
    first = repositories.fingerprints()
    repositories.refresh()
    assert repositories.fingerprints() == first
    s3.put_object(Bucket=filled.bucket, Key="models/alpha/2/model.py", Body=b"# version 2")
    assert repositories.fingerprints() == first, "the copy changed before a refresh"
    repositories.refresh()
    second = repositories.fingerprints()
    assert second["alpha"] != first["alpha"]
    assert second["beta"] == first["beta"]
    assert repositories.scan().models["alpha"].available_versions == [1, 2]


def test_a_model_in_the_bucket_and_in_a_local_repository_is_not_unique(
    filled: remote.RemoteRepository, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    (local / "alpha/1").mkdir(parents=True)
    (local / "alpha/config.pbtxt").write_text(CONFIG.format(name="alpha"))
    repositories = Repositories([str(local), filled.location], tmp_path / "cache")
    repositories.refresh()
    result = repositories.scan()
    assert sorted(result.models) == ["beta"]
    assert "not unique across all model repositories" in result.errors["alpha"]
    assert filled.location in result.errors["alpha"]


def test_a_reader_sees_the_old_file_or_the_new_one_never_half(
    s3: Any, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    """9 MiB: past s3transfer's threshold, so it comes in ranged parts (streamed to disk)."""
    old, new = b"a" * (9 << 20), b"b" * (9 << 20)
    s3.put_object(Bucket=bucket, Key="big/1/model.bin", Body=old)
    repository = remote.parse(f"s3://{s3_server.hostport}/{bucket}")
    assert repository is not None
    copy = tmp_path / "copy"
    remote.sync(repository, copy)
    s3.put_object(Bucket=bucket, Key="big/1/model.bin", Body=new)
    seen: set[bytes] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            data = (copy / "big/1/model.bin").read_bytes()
            seen.add(data if data in (old, new) else b"torn:" + data[:16])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        # Two syncs at once share the copy's lock: both succeed, and one of them downloads.
        syncs = [threading.Thread(target=remote.sync, args=(repository, copy)) for _ in range(2)]
        for thread in syncs:
            thread.start()
        for thread in syncs:
            thread.join(timeout=60)
    finally:
        done.set()
        reader.join(timeout=10)
    assert (copy / "big/1/model.bin").read_bytes() == new
    assert seen <= {old, new}, f"a reader saw a torn file: {[s[:21] for s in seen]}"
    assert list((copy / ".conch-staging").glob("*")) == [], "a temporary file was left"


# --- errors ---------------------------------------------------------------------------------


def test_a_missing_bucket_is_named(s3: Any, s3_server: S3Server, tmp_path: Path) -> None:
    location = f"s3://{s3_server.hostport}/no-such-bucket-here/models"
    with pytest.raises(ConchError) as raised:
        Repositories([location], tmp_path / "cache").refresh()
    assert raised.value.code == ErrorCode.INVALID_ARG
    assert "no such bucket 'no-such-bucket-here'" in raised.value.message
    assert location in raised.value.message


def test_an_empty_prefix_is_no_model_found(
    s3: Any, bucket: str, s3_server: S3Server, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="elsewhere/alpha/config.pbtxt", Body=b"")
    location = f"s3://{s3_server.hostport}/{bucket}/models"
    with pytest.raises(ConchError) as raised:
        Repositories([location], tmp_path / "cache").refresh()
    assert raised.value.code == ErrorCode.INVALID_ARG
    assert f"no model found under s3://{bucket}/models/" in raised.value.message
    assert location in raised.value.message


def test_an_unreachable_endpoint_fails_within_the_bounds(s3: Any, tmp_path: Path) -> None:
    repository = remote.parse(f"s3://127.0.0.1:{free_port()}/models/prefix")
    assert repository is not None
    started = time.monotonic()
    with pytest.raises(ConchError) as raised:
        remote.sync(repository, tmp_path / "copy", limits=QUICK)
    assert raised.value.code == ErrorCode.UNAVAILABLE
    assert "endpoint unreachable" in raised.value.message
    assert repository.location in raised.value.message
    assert time.monotonic() - started < 10


def test_a_server_that_never_answers_fails_within_the_bounds(s3: Any, tmp_path: Path) -> None:
    """A listener that never accepts: connections complete (the kernel's backlog) and no
    answer ever comes, as from a hung server."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        repository = remote.parse(f"s3://127.0.0.1:{port}/models/prefix")
        assert repository is not None
        started = time.monotonic()
        with pytest.raises(ConchError) as raised:
            remote.sync(repository, tmp_path / "copy", limits=QUICK)
        took = time.monotonic() - started
    assert raised.value.code == ErrorCode.UNAVAILABLE
    assert "endpoint unreachable" in raised.value.message, raised.value.message
    assert took < 10


def test_no_credentials_are_named(
    s3: Any, bucket: str, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="models/alpha/config.pbtxt", Body=b"")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    repository = remote.parse(f"s3://{s3_server.hostport}/{bucket}/models")
    assert repository is not None
    with pytest.raises(ConchError) as raised:
        remote.sync(repository, tmp_path / "copy", limits=QUICK)
    assert raised.value.code == ErrorCode.INVALID_ARG
    assert "no usable AWS credentials" in raised.value.message
    assert "AWS_ACCESS_KEY_ID" in raised.value.message


def test_the_right_credentials_are_let_in_and_wrong_ones_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """moto checks keys and signatures once its IAM has a user: as AWS and MinIO do."""
    with S3Server(authenticated=True) as server:
        _isolated(monkeypatch, tmp_path, server.env)
        s3 = server.client()
        s3.create_bucket(Bucket="guarded")
        upload_tree(s3, "guarded", "models", _models(tmp_path / "source"))
        repository = remote.parse(f"s3://{server.hostport}/guarded/models")
        assert repository is not None
        remote.sync(repository, tmp_path / "copy")
        assert _files(tmp_path / "copy") == _files(tmp_path / "source")
        for name, value in (
            ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
            ("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000"),
        ):
            monkeypatch.setenv(name, value)
            with pytest.raises(ConchError) as raised:
                remote.sync(repository, tmp_path / "other", limits=QUICK)
            assert raised.value.code == ErrorCode.INVALID_ARG
            assert "access denied" in raised.value.message
            assert repository.location in raised.value.message

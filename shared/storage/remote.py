"""Remote model repositories (``s3://``), each read through a local copy.

Locations follow Triton's forms: ``s3://bucket/prefix`` (AWS, credentials and region the way
the AWS tools read them), ``s3://host:port/bucket/prefix`` for an S3-compatible server
(MinIO, Ceph) over HTTP, and ``s3://https://host:port/bucket/prefix`` over HTTPS.

``sync`` keeps the copy: it downloads new and changed objects (size, ETag and LastModified
against the manifest ``.conch-remote.json`` in the copy), deletes the files whose objects are
gone, and leaves the others untouched, modification times included, since the poll's
fingerprints are made of names, sizes and modification times. A file is written under a
temporary name and renamed into place, so a reader sees the old file or the new one, never half
of one. Files the copy did not download (a model sent with a load request) are not its to
delete. One sync at a time per copy: an ``flock`` serialises the processes sharing a cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.storage import s3_client
from shared.storage.s3_client import DEFAULT_LIMITS, Limits, RemoteObject
from shared.wire.errors import invalid, unavailable

SCHEME = "s3://"
MANIFEST = ".conch-remote.json"
_LOCK = ".conch-remote.lock"
_STAGING = ".conch-staging"  # temporary files, renamed into place when complete
_RESERVED = {MANIFEST, _LOCK, _STAGING}


@dataclass(frozen=True)
class RemoteRepository:
    location: str
    bucket: str
    prefix: str
    # An S3-compatible server's URL (scheme, host and port); "" for AWS (or AWS_ENDPOINT_URL).
    endpoint: str = ""


def parse(location: str) -> RemoteRepository | None:
    """The remote repository ``location`` names, or None for a local path."""
    if not location.startswith(SCHEME):
        return None
    rest = location[len(SCHEME) :]
    endpoint = ""
    for scheme in ("https://", "http://"):
        if rest.startswith(scheme):
            host, _, rest = rest[len(scheme) :].partition("/")
            endpoint = f"{scheme}{host}"
            break
    else:
        first, _, tail = rest.partition("/")
        if ":" in first:  # host:port, Triton's form for a non-AWS server (HTTP)
            endpoint, rest = f"http://{first}", tail
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise invalid(
            f"model repository '{location}' names no bucket; expected s3://bucket/prefix, "
            "s3://host:port/bucket/prefix or s3://https://host:port/bucket/prefix"
        )
    return RemoteRepository(location, bucket, prefix.strip("/"), endpoint)


def default_cache_dir() -> Path:
    """Where local copies of remote repositories live when no cache directory is configured."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "conch" / "repositories"


def copy_dir(cache_dir: str | Path | None, index: int, repository: RemoteRepository) -> Path:
    """The local directory holding the copy of ``repository`` (made if missing)."""
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in repository.location[5:])
    path = base / f"{index}-{safe}"[:200]
    path.mkdir(parents=True, exist_ok=True)
    return path


def sync(
    repository: RemoteRepository,
    local: Path,
    model: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Make ``local`` (or its ``model`` directory) an exact copy of the remote prefix: the
    objects that are new or changed are downloaded, the files downloaded before whose objects
    are gone deleted (files it never downloaded are not its to delete), the rest left alone.

    A whole repository with no object at all is an error ("no model found"); a ``model`` absent
    from this repository is not (it may be another repository's): its copy, if any, is removed.
    """
    if model is not None and (not model or "/" in model or model.startswith(".")):
        raise invalid(f"model name '{model}' cannot name a directory of {repository.location}")
    base = f"{repository.prefix}/" if repository.prefix else ""
    scope = f"{model}/" if model else ""
    local.mkdir(parents=True, exist_ok=True)
    s3 = s3_client.client(repository.endpoint, limits)
    with _locked(local):
        listed = s3_client.list_objects(s3, repository.location, repository.bucket, base + scope)
        wanted = _relative(repository, listed, base)
        if model is None and not wanted:
            where = f"s3://{repository.bucket}/{base}"
            raise invalid(
                f"no model found under {where} (model repository '{repository.location}', "
                f"endpoint {s3_client.endpoint_of(s3)}): the prefix holds no object"
            )
        manifest = _read_manifest(local)
        before = dict(manifest)
        try:
            _remove_gone(local, scope, wanted, manifest)
            for relative, found in sorted(wanted.items()):
                if found is None:  # a "folder" object: an empty directory
                    (local / relative).mkdir(parents=True, exist_ok=True)
                    manifest[relative + "/"] = {}
                elif not _unchanged(local / relative, found, manifest.get(relative)) and _download(
                    s3, repository, local, relative, found
                ):
                    manifest[relative] = _entry(found)
        except OSError as exc:
            raise unavailable(
                f"model repository '{repository.location}': writing its local copy in "
                f"{local} failed: {exc}"
            ) from exc
        finally:
            if manifest != before:
                _write_manifest(local, manifest)


def _relative(
    repository: RemoteRepository, listed: list[RemoteObject], base: str
) -> dict[str, RemoteObject | None]:
    """The copy's paths of the listed objects (None: a "folder" object, ``key/``)."""
    wanted: dict[str, RemoteObject | None] = {}
    for found in listed:
        relative = found.key[len(base) :]
        folder = relative.endswith("/")
        parts = relative.rstrip("/").split("/")
        if not relative.rstrip("/"):
            continue  # the prefix's own folder object
        if any(part in ("", ".", "..") for part in parts):
            raise invalid(
                f"model repository '{repository.location}': object key '{found.key}' cannot be "
                "a file of a local copy (empty, '.' or '..' path segment)"
            )
        if parts[0] in _RESERVED:
            continue
        wanted[relative.rstrip("/")] = None if folder else found
    return wanted


def _unchanged(path: Path, found: RemoteObject, entry: dict[str, object] | None) -> bool:
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return entry == _entry(found) and size == found.size and path.is_file()


def _entry(found: RemoteObject) -> dict[str, object]:
    return {"size": found.size, "etag": found.etag, "modified": found.modified_s}


def _mtime_ns(found: RemoteObject) -> int:
    """LastModified's whole seconds, and a fraction of a second drawn from the ETag: two
    versions of a file written within one second (LastModified's resolution) still differ."""
    fraction = int(hashlib.sha256(found.etag.encode()).hexdigest()[:12], 16) % 1_000_000_000
    return int(found.modified_s) * 1_000_000_000 + fraction


def _download(
    s3: object, repository: RemoteRepository, local: Path, relative: str, found: RemoteObject
) -> bool:
    target = local / relative
    staging = local / _STAGING
    staging.mkdir(exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=staging, prefix="part-")
    try:
        with os.fdopen(handle, "wb") as out:
            if not s3_client.download(s3, repository.location, repository.bucket, found.key, out):
                return False
        mtime = _mtime_ns(found)
        os.utime(temporary, ns=(mtime, mtime))
        for parent in reversed(target.parents):  # a file where a directory must go
            if parent.is_file() and local in parent.parents:
                parent.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(temporary, target)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _remove_gone(
    local: Path,
    scope: str,
    wanted: dict[str, RemoteObject | None],
    manifest: dict[str, dict[str, object]],
) -> None:
    """Delete what the copy downloaded (the manifest's entries in ``scope``) that is gone from
    the bucket, and the directories that emptied."""
    for name in sorted(n for n in manifest if n.startswith(scope)):
        relative = name.rstrip("/")
        if relative in wanted and (wanted[relative] is None) == name.endswith("/"):
            continue
        del manifest[name]
        path = local / relative
        if name.endswith("/"):
            with contextlib.suppress(OSError):
                path.rmdir()
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for parent in path.parents:
            if parent == local or local not in parent.parents:
                break
            if parent.relative_to(local).as_posix() in wanted:
                break
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break


def _read_manifest(local: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads((local / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    objects = data.get("objects") if isinstance(data, dict) else None
    return dict(objects) if isinstance(objects, dict) else {}


def _write_manifest(local: Path, manifest: dict[str, dict[str, object]]) -> None:
    staging = local / _STAGING
    staging.mkdir(exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=staging, prefix="manifest-")
    with os.fdopen(handle, "w") as out:
        json.dump({"version": 1, "objects": manifest}, out, sort_keys=True)
    os.replace(temporary, local / MANIFEST)


@contextlib.contextmanager
def _locked(local: Path) -> Iterator[None]:
    """Hold the copy's lock: one sync at a time, across the processes that share the copy."""
    with open(local / _LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            shutil.rmtree(local / _STAGING, ignore_errors=True)  # what a killed sync left
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

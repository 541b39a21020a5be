"""Remote model repositories (``s3://``), each read through a local copy.

Locations follow Triton's forms: ``s3://bucket/prefix`` (AWS, credentials and region the way
the AWS tools read them), ``s3://host:port/bucket/prefix`` for an S3-compatible server
(MinIO, Ceph) over HTTP, and ``s3://https://host:port/bucket/prefix`` over HTTPS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shared.wire.errors import invalid

SCHEME = "s3://"


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


def copy_dir(cache_dir: str | Path | None, index: int, repository: RemoteRepository) -> Path:
    """The local directory holding the copy of ``repository`` (made if missing)."""
    from shared.storage.repositories import default_cache_dir

    base = Path(cache_dir) if cache_dir else default_cache_dir()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in repository.location[5:])
    path = base / f"{index}-{safe}"[:200]
    path.mkdir(parents=True, exist_ok=True)
    return path


def sync(repository: RemoteRepository, local: Path, model: str | None = None) -> None:
    """Make ``local`` (or its ``model`` directory) an exact copy of the remote prefix."""
    raise invalid(f"remote model repositories are not available yet: {repository.location}")

"""S3 access for remote model repositories: clients, listing, streamed downloads, and errors that
name the repository and what went wrong.

Credentials, region and the endpoint come from boto3's default chain, the way the AWS tools read
them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
``~/.aws``, ``AWS_REGION``/``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``/``AWS_ENDPOINT_URL_S3``,
``AWS_CA_BUNDLE``, an instance role); a location's own endpoint (``s3://host:port/...``) wins
over the variables. A custom endpoint is addressed path-style (``http://host:port/bucket/key``),
which every S3-compatible server answers. Each request has bounded connect and read timeouts
and a few retries, so a server that hangs makes a sync fail instead of holding a worker forever.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import boto3
from boto3.exceptions import Boto3Error
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
    SSLError,
)

from shared.wire.errors import invalid, unavailable


@dataclass(frozen=True)
class Limits:
    """How long one request may take, and how many times it is tried."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    attempts: int = 3


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class RemoteObject:
    key: str
    size: int
    etag: str
    modified_s: float  # LastModified, seconds since the epoch


# The variables that change what a client is (a new value: a new client).
_ENVIRONMENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CA_BUNDLE",
)
_ACCESS_DENIED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
}
_clients: dict[tuple[object, ...], Any] = {}
_clients_lock = threading.Lock()


def client(endpoint: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """An S3 client for ``endpoint`` ("" for AWS or ``AWS_ENDPOINT_URL``), shared by the calls
    that ask for the same one (boto3's clients are thread-safe; making one takes a while)."""
    key = (endpoint, limits, *(os.environ.get(name) for name in _ENVIRONMENT))
    with _clients_lock:
        found = _clients.get(key)
        if found is None:
            found = _clients[key] = _new_client(endpoint, limits)
        return found


def _new_client(endpoint: str, limits: Limits) -> Any:
    custom = endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {
        "connect_timeout": limits.connect_timeout_s,
        "read_timeout": limits.read_timeout_s,
        "retries": {"mode": "standard", "total_max_attempts": limits.attempts},
    }
    if custom:
        options["s3"] = {"addressing_style": "path"}
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint or None, config=Config(**options))


def endpoint_of(s3: Any) -> str:
    return str(s3.meta.endpoint_url)


def list_objects(s3: Any, location: str, bucket: str, prefix: str) -> list[RemoteObject]:
    """Every object under ``prefix`` of ``bucket``."""
    found: list[RemoteObject] = []
    with translated_errors(s3, location, bucket, "listing the objects"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", ()):
                found.append(
                    RemoteObject(
                        key=item["Key"],
                        size=int(item["Size"]),
                        etag=str(item.get("ETag", "")).strip('"'),
                        modified_s=item["LastModified"].timestamp(),
                    )
                )
    return found


def download(s3: Any, location: str, bucket: str, key: str, out: IO[bytes]) -> bool:
    """Stream the object ``key`` into ``out`` (in parts, never whole in memory); False when it
    was removed since it was listed."""
    with translated_errors(s3, location, bucket, f"downloading '{key}'"):
        try:
            s3.download_fileobj(bucket, key, out)
        except ClientError as exc:
            if _code(exc) in {"404", "NoSuchKey"}:
                return False
            raise
    return True


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def translated_errors(s3: Any, location: str, bucket: str, doing: str) -> Iterator[None]:
    """boto3's errors as ConchErrors that name the repository, the endpoint and the cause."""
    where = f"model repository '{location}' (endpoint {endpoint_of(s3)})"
    try:
        yield
    except ClientError as exc:
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = exc.response.get("Error", {}).get("Message", "") or str(exc)
        if code == "NoSuchBucket":
            raise invalid(f"{where}: no such bucket '{bucket}'") from exc
        if code in _ACCESS_DENIED or status in (401, 403):
            raise invalid(
                f"{where}: access denied while {doing} ({code}: {message}); check the "
                "credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or "
                "~/.aws) and that they may list and read the bucket"
            ) from exc
        raise unavailable(f"{where}: {doing} failed ({code or status}: {message})") from exc
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise invalid(
            f"{where}: no usable AWS credentials ({exc}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or ~/.aws/credentials"
        ) from exc
    except SSLError as exc:
        raise unavailable(
            f"{where}: the TLS handshake failed while {doing} ({exc}); for a server whose "
            "certificate a private CA signed, set AWS_CA_BUNDLE to that CA's certificate"
        ) from exc
    except (ConnectionError, HTTPClientError) as exc:  # refused, unresolvable, timed out, cut
        raise unavailable(f"{where}: endpoint unreachable while {doing} ({exc})") from exc
    except (BotoCoreError, Boto3Error) as exc:
        raise unavailable(f"{where}: {doing} failed ({exc})") from exc

"""The tests' S3-compatible server: moto's standalone server (``moto_server``, the S3 HTTP API)
as a process on loopback, for the remote-repository tests.

``with S3Server() as server:`` starts it on a free port and waits until it accepts connections;
``server.endpoint`` is its URL, ``server.env`` the variables that point boto3 (and a worker) at
its credentials, and ``server.client()`` a boto3 client to fill buckets with. With
``authenticated=True`` the server checks credentials (moto's IAM): the first requests create a
user with full access, whose key is ``server.env``'s, and from then on an unknown key or a wrong
secret is refused as AWS refuses it. With ``tls_dir``, it serves HTTPS with a self-signed
certificate for its address written there (``server.ca_bundle``, for ``AWS_CA_BUNDLE``).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from conch.ports import free_port
from tests.waiting import wait_until

REGION = "us-east-1"


def _moto_server() -> list[str]:
    found = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "moto.server"]


def self_signed(directory: Path, host: str) -> tuple[Path, Path]:
    """A certificate for ``host`` (an IP address) that is its own CA, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "s3.crt", directory / "s3.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class S3Server:
    def __init__(
        self, authenticated: bool = False, host: str = "127.0.0.1", tls_dir: Path | None = None
    ):
        self.host = host
        self.port = free_port()
        self.authenticated = authenticated
        self.tls: tuple[Path, Path] | None = self_signed(tls_dir, host) if tls_dir else None
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.output = b""

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def ca_bundle(self) -> str | None:
        return str(self.tls[0]) if self.tls else None

    @property
    def hostport(self) -> str:
        """``host:port``, for Triton's ``s3://host:port/bucket/prefix`` form."""
        return f"{self.host}:{self.port}"

    def __enter__(self) -> S3Server:
        env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
        if self.authenticated:
            # Only the first three requests go unchecked: ours (below), that make the user, its
            # key and its policy. Without it, moto takes any key.
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        tls = ["-c", str(self.tls[0]), "-k", str(self.tls[1])] if self.tls else []
        self.process = subprocess.Popen(
            [*_moto_server(), "-H", self.host, "-p", str(self.port), *tls],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(
            self._accepts,
            30,
            every=0.05,
            failure=lambda: f"moto_server not listening on {self.endpoint}: {self._stop()!r}",
        )
        if self.authenticated:
            self._make_user()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _accepts(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"moto_server exited: {self._stop()!r}")
        try:
            socket.create_connection((self.host, self.port), timeout=0.5).close()
        except OSError:
            return False
        return True

    def _stop(self) -> bytes:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
            try:
                self.output, _ = self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.output, _ = self.process.communicate()
            self.process = None
        return self.output[-4000:]

    def _make_user(self) -> None:
        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
            verify=self.ca_bundle,
        )
        iam.create_user(UserName="conch")
        key = iam.create_access_key(UserName="conch")["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName="conch", PolicyName="all", PolicyDocument=json.dumps(policy))
        self.env["AWS_ACCESS_KEY_ID"] = key["AccessKeyId"]
        self.env["AWS_SECRET_ACCESS_KEY"] = key["SecretAccessKey"]

    def client(self) -> Any:
        """A boto3 S3 client with the server's credentials (path-style, as Conch's)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}),
            verify=self.ca_bundle,
        )


def upload_tree(s3: Any, bucket: str, prefix: str, root: Path) -> list[str]:
    """Every file under ``root`` as an object under ``prefix`` (keys returned, sorted)."""
    keys = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(root).as_posix()]))
        s3.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys

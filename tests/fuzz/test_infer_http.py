"""Hostile inference bodies over HTTP: JSON with junk everywhere, the binary extension with
lying lengths, compressed bodies, oversized ones. Every answer is a 2xx or a 4xx with Triton's
``{"error": ...}``, never a 5xx, never a hang; afterwards the mesh serves and Redis holds no
orphaned entry.

The short form runs with the suite (a fixed set of examples: the same cases every run); the
long form (``chaos`` marker, ``make chaos``) draws many more, at random.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz.bodies import (
    VERSION_ANSWERS,
    HttpCase,
    binary_case,
    compressed_case,
    gzip_bomb,
    integer_case,
    json_case,
    nesting_case,
    versions,
)
from tests.fuzz.checks import ANSWER_WITHIN_S, Tally, check_http_answer, orphans, timed_post
from tests.mesh import Mesh

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

CLASSES = {
    "json": json_case(),
    "binary": binary_case(),
    "compressed": compressed_case(),
    "nesting": nesting_case(),
    "integers": integer_case(),
}


def fuzz_settings(examples: int, fixed: bool) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=fixed,
        database=None,
        phases=[Phase.explicit, Phase.generate],  # a failure is reported as found, unshrunk
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def client(fuzz_mesh: Mesh) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://{fuzz_mesh.url}", timeout=ANSWER_WITHIN_S + 5) as c:
        yield c


def run_class(client: httpx.Client, name: str, examples: int, fixed: bool) -> None:
    tally = Tally(f"http {name}")

    @fuzz_settings(examples, fixed)
    @given(case=CLASSES[name])
    def one(case: HttpCase) -> None:
        response, seconds = timed_post(
            client, f"/v2/models/{case.model}/infer", content=case.body, headers=case.headers
        )
        tally.add(str(response.status_code), seconds)
        check_http_answer(response, seconds)

    try:
        one()
    finally:
        tally.record()


@pytest.mark.parametrize("name", list(CLASSES))
def test_hostile_bodies_short(client: httpx.Client, name: str) -> None:
    run_class(client, name, examples=120, fixed=True)


@pytest.mark.chaos
@pytest.mark.parametrize("name", list(CLASSES))
def test_hostile_bodies_full(client: httpx.Client, name: str) -> None:
    run_class(client, name, examples=3000, fixed=False)


def run_versions(client: httpx.Client, examples: int, fixed: bool) -> None:
    """Every version state of ``versioned``: its answer exactly, and never a 5xx (a 503 for a
    version the policy does not serve tells a client to retry forever)."""
    tally = Tally("http versions")
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [3]}]}
    ).encode()

    @fuzz_settings(examples, fixed)
    @given(version=versions)
    def one(version: str) -> None:
        path = "/v2/models/versioned/infer"
        if version:
            path = f"/v2/models/versioned/versions/{quote(version, safe='')}/infer"
        response, seconds = timed_post(
            client, path, content=body, headers={"Content-Type": "application/json"}
        )
        tally.add(str(response.status_code), seconds)
        check_http_answer(response, seconds)
        if version in VERSION_ANSWERS:
            assert response.status_code == VERSION_ANSWERS[version], (version, response.text)

    try:
        one()
    finally:
        tally.record()


def test_every_version_state_short(client: httpx.Client) -> None:
    run_versions(client, examples=60, fixed=True)


@pytest.mark.parametrize("megabytes", [256])
def test_gzip_bomb_is_refused_with_413(client: httpx.Client, megabytes: int) -> None:
    """A small gzip body that inflates past the request size cap: 413, read no further."""
    bomb = gzip_bomb(megabytes << 20)
    response, seconds = timed_post(
        client,
        "/v2/models/simple/infer",
        content=bomb,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    Tally("http gzip bomb").add(str(response.status_code), seconds)
    check_http_answer(response, seconds)
    assert response.status_code == 413, response.text


def test_announced_4gib_body_is_refused_at_once(fuzz_mesh: Mesh) -> None:
    """Content-Length of 4 GiB with a few bytes sent: 413 without waiting for the rest."""
    host, port = fuzz_mesh.url.split(":")
    with socket.create_connection((host, int(port)), timeout=ANSWER_WITHIN_S) as sock:
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 4294967296\r\n\r\n{"inputs"'
        )
        started = time.monotonic()
        head = sock.recv(4096)
        seconds = time.monotonic() - started
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    assert seconds < 5


def test_after_fuzzing_the_mesh_serves_and_redis_holds_no_orphan(fuzz_mesh: Mesh) -> None:
    client = httpclient.InferenceServerClient(fuzz_mesh.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
    assert orphans(fuzz_mesh.redis_url) == {"queued": 0, "pending": 0, "dead-lettered": 0}


_ = st  # strategies are built in tests.fuzz.bodies

"""A/B weights changed at runtime through the admin API, seen in the split of the next requests.

``simple_ab`` (examples/make_models.py) has versions 1 and 2, both loaded (version_policy all);
version ``v`` answers OUTPUT0 = v * INPUT0, and the response's ``model_version`` names it too.
The weights are set through Envoy like any admin call, so whichever gateway answers the PUT,
every gateway process must follow it (the change feed) before the split can hold.
"""

from __future__ import annotations

import urllib.error
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.compose.conftest import ADMIN_TOKEN, http_json, wait_for

MODEL = "simple_ab"
N = 300
# Version 2's share with weights 20/80 is binomial: sd = sqrt(0.8 * 0.2 / 300) ≈ 0.023, so
# ±0.08 is about 3.5 sd (a false failure about once in 2,000 runs).
TOLERANCE = 0.08


def _weights_url(http_url: str) -> str:
    return f"http://{http_url}/v2/admin/models/{MODEL}/weights"


@pytest.fixture
def restored_weights(http_url: str) -> Iterator[str]:
    """The weights as they were before the test, put back afterwards (DELETE if there were
    none: Triton's default, the newest version)."""
    assert ADMIN_TOKEN, "make compose-test sets CONCH_ADMIN_TOKEN: the admin API needs it"
    url = _weights_url(http_url)
    before = http_json(url).get("weights") or {}
    try:
        yield url
    finally:
        if before:
            http_json(url, {"weights": before}, method="PUT")
        else:
            try:
                http_json(url, method="DELETE")
            except urllib.error.HTTPError as exc:  # none set: nothing to clear
                assert exc.code == 404, exc


def _versions(client: httpclient.InferenceServerClient, n: int) -> Counter[int]:
    """Which version answered each of ``n`` requests without a version, read from the answer
    (OUTPUT0 = version * 7) and checked against the response's ``model_version``."""
    seen: Counter[int] = Counter()
    for _ in range(n):
        tensor = httpclient.InferInput("INPUT0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[7]], dtype=np.int32))
        result = client.infer(MODEL, [tensor])
        value = int(result.as_numpy("OUTPUT0")[0][0])
        assert value % 7 == 0 and value // 7 in (1, 2), value
        assert result.get_response()["model_version"] == str(value // 7)
        seen[value // 7] += 1
    return seen


def test_both_versions_are_loaded_and_addressable(http_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    for version in ("1", "2"):
        assert client.is_model_ready(MODEL, version)
        tensor = httpclient.InferInput("INPUT0", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[5]], dtype=np.int32))
        result = client.infer(MODEL, [tensor], model_version=version)
        assert int(result.as_numpy("OUTPUT0")[0][0]) == 5 * int(version)


def test_weights_set_through_the_admin_api_split_the_next_requests(
    http_url: str, restored_weights: str
) -> None:
    url = restored_weights
    client = httpclient.InferenceServerClient(http_url)

    answer = http_json(url, {"weights": {"1": 100}}, method="PUT")
    assert answer["weights"] == {"1": 100}, answer
    assert sorted(answer["live_versions"]) == [1, 2], answer
    # Every gateway process follows within the change feed's delay: wait until a run of
    # requests (spread over both gateways by Envoy) all go to version 1, then count.
    wait_for("every gateway routing to version 1", lambda: set(_versions(client, 20)) == {1}, 30)
    only_one = _versions(client, 100)
    assert only_one == Counter({1: 100}), only_one

    answer = http_json(url, {"weights": {"1": 20, "2": 80}}, method="PUT")
    assert answer["weights"] == {"1": 20, "2": 80}, answer
    assert http_json(url)["weights"] == {"1": 20, "2": 80}
    wait_for("version 2 answering", lambda: 2 in _versions(client, 20), 30, pause=0.2)
    wait_for("every gateway following 20/80", lambda: _versions(client, 40)[2] >= 20, 30)
    split = _versions(client, N)
    share = split[2] / N
    assert abs(share - 0.8) <= TOLERANCE, f"version 2 answered {share:.0%} of {N}: {split}"
    assert split[1] > 0, split
    print(f"weights 20/80 -> {dict(split)} of {N} requests")

"""Schemathesis over the gateway's own OpenAPI, restricted to the admin API (``/v2/admin/``) and
Triton's model repository extension (``/v2/repository/``): schema-conforming and non-conforming
requests, with the admin token. Every answer is a 2xx or a 4xx with Triton's
``{"error": ...}``, never a 5xx, never a hang; afterwards the served models still answer.

The served models' names are left out of the repository API's generated path parameters (a
fuzzer that unloads the model the test then checks proves nothing); everything else is fair game,
``../`` included, and the served models' weights and shadow settings are fuzzed too.
"""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pytest
import schemathesis
import tritonclient.http as httpclient
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.fuzz.checks import ANSWER_WITHIN_S, Tally, check_http_answer, orphans
from tests.fuzz.conftest import ADMIN_TOKEN, MODELS
from tests.mesh import Mesh

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

PATHS = r"^/v2/(admin|repository)/"


@pytest.fixture(scope="module")
def schema(fuzz_mesh: Mesh) -> schemathesis.schemas.BaseSchema:
    return schemathesis.openapi.from_url(f"http://{fuzz_mesh.url}/schema/openapi.json").include(
        path_regex=PATHS
    )


def _unloads_a_served_model(case: schemathesis.Case) -> bool:
    """Load and unload of the served models are left out; their weights and shadow settings
    are fuzzed (and cleared before the final check)."""
    if not case.operation.path.startswith("/v2/repository/"):
        return False
    return any(str(v) in MODELS for v in (case.path_parameters or {}).values())


def run(schema: schemathesis.schemas.BaseSchema, base_url: str, examples: int, fixed: bool) -> None:
    tally = Tally("openapi admin + repository")
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 8, [op.label for op in operations]
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples,
                deadline=None,
                derandomize=fixed,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def one(case: schemathesis.Case) -> None:
                if _unloads_a_served_model(case):
                    return
                started = time.monotonic()
                response = case.call(base_url=base_url, headers=auth, timeout=ANSWER_WITHIN_S)
                seconds = time.monotonic() - started
                tally.add(str(response.status_code), seconds)
                check_http_answer(response, seconds)

            try:
                one()
            except Exception as exc:
                tally.record()
                raise AssertionError(f"{operation.label} ({mode.value}): {exc}") from exc
    tally.record()


def test_admin_and_repository_apis_short(
    schema: schemathesis.schemas.BaseSchema, fuzz_mesh: Mesh
) -> None:
    run(schema, f"http://{fuzz_mesh.url}", examples=25, fixed=True)


@pytest.mark.chaos
def test_admin_and_repository_apis_full(
    schema: schemathesis.schemas.BaseSchema, fuzz_mesh: Mesh
) -> None:
    run(schema, f"http://{fuzz_mesh.url}", examples=400, fixed=False)


def test_after_api_fuzzing_the_models_serve(fuzz_mesh: Mesh) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    for model in MODELS:  # undo what the fuzzer may have set
        for setting in ("weights", "shadow"):
            url = f"http://{fuzz_mesh.url}/v2/admin/models/{model}/{setting}"
            assert httpx.delete(url, headers=auth).status_code in (200, 404)
    time.sleep(1.5)  # gateways re-read the traffic policy within 1 s
    client = httpclient.InferenceServerClient(fuzz_mesh.url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), 2 * a)
    assert orphans(fuzz_mesh.redis_url) == {"queued": 0, "pending": 0, "dead-lettered": 0}


DEEP = b'{"a":' + b"[" * 50_000 + b"1" + b"]" * 50_000 + b"}"
DEEP_TEXT = DEEP.decode()
# Every route that decodes a JSON body, and a body nested far past the gateway's bound.
DEEP_ROUTES = [
    ("POST", "/v2/models/simple/infer", DEEP),
    ("POST", "/v2/models/simple/generate", DEEP),
    ("POST", "/v2/models/simple/generate_stream", DEEP),
    ("POST", "/v2/repository/index", DEEP),
    ("POST", "/v2/repository/models/fuzz_deep/load", DEEP),
    ("POST", "/v2/repository/models/fuzz_deep/load",
     json.dumps({"parameters": {"config": DEEP_TEXT}}).encode()),
    ("POST", "/v2/repository/models/fuzz_deep/unload", DEEP),
    ("PUT", "/v2/admin/models/simple/weights", DEEP),
    ("PUT", "/v2/admin/models/simple/shadow", DEEP),
    ("PUT", "/v2/admin/tenants/fuzz_deep", DEEP),
    ("POST", "/v2/trace/setting", DEEP),
    ("POST", "/v2/models/simple/trace/setting", DEEP),
    ("POST", "/v2/logging", DEEP),
    ("POST", "/v2/systemsharedmemory/region/fuzz_deep/register", DEEP),
    ("POST", "/v2/cudasharedmemory/region/fuzz_deep/register", DEEP),
    ("POST", "/v1/completions", DEEP),
    ("POST", "/v1/chat/completions", DEEP),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body"), DEEP_ROUTES, ids=lambda v: str(v)[:40])
def test_deeply_nested_bodies_are_client_errors_everywhere(
    fuzz_mesh: Mesh, method: str, path: str, body: bytes
) -> None:
    """The nesting class on every JSON route, not only inference: a 4xx, never a 5xx."""
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    started = time.monotonic()
    response = httpx.request(
        method, f"http://{fuzz_mesh.url}{path}", content=body, headers=auth, timeout=15
    )
    seconds = time.monotonic() - started
    assert response.status_code < 500, (path, response.status_code, response.text[:300])
    if response.status_code != 404:  # an absent route (OpenAI off) has Litestar's own body
        check_http_answer(response, seconds)

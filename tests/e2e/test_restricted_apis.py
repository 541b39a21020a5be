"""Triton's restricted APIs (--http-restricted-api, --grpc-restricted-protocol) with tritonclient
over HTTP and gRPC: a restricted category answers Triton's refusal (403 / UNAVAILABLE, Triton's
text) without the header's value, other categories stay open, and the tenants' API keys apply
as well."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import ROOT, Mesh, flush_database, write_example_models
from tests.waiting import retrying_sync

pytestmark = pytest.mark.e2e

ADMIN_TOKEN = "restricted-admin-token-0123456789"
TENANT_KEY = "restricted-tenant-key-0123456789"
INFER = {"infer-key": "i-secret"}
ADMIN = {"admin-key": "a-secret"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "i-secret"}
GRPC_HEALTH = {"triton-grpc-protocol-health-key": "h-secret"}
HTTP_REFUSAL = "This API is restricted, expecting header '{}'"
GRPC_REFUSAL = "This protocol is restricted, expecting header 'triton-grpc-protocol-{}'"


@pytest.fixture(scope="module")
def restricted_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, str]]:
    flush_database(redis_server.url)
    repository = tmp_path_factory.mktemp("restricted_models")
    write_example_models(repository, "simple")
    port = free_port()
    mesh = Mesh(redis_server.url, repository, log_dir=tmp_path_factory.mktemp("restricted_logs"))
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(
            CONCH_GATEWAY_GRPC_PORT=str(port),
            CONCH_GATEWAY_ADMIN_TOKEN=ADMIN_TOKEN,
            CONCH_GATEWAY_ALLOW_ANONYMOUS="false",
            CONCH_GATEWAY_HTTP_RESTRICTED_API=(
                "inference:infer-key=i-secret; model-config,model-repository:admin-key=a-secret"
            ),
            CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL=(
                "inference:infer-key=i-secret;health:health-key=h-secret"
            ),
        )
        mesh.wait_ready(["simple"])
        admin = {**ADMIN, "authorization": f"Bearer {ADMIN_TOKEN}"}
        put = httpx.put(
            f"http://{mesh.url}/v2/admin/tenants/restricted",
            json={"api_keys": [TENANT_KEY]},
            headers=admin,
        )
        assert put.status_code == 200, put.text
        yield mesh, f"127.0.0.1:{port}"
    finally:
        mesh.stop()


def _inputs(module: object) -> list[object]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 16], "INT32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
        inputs.append(tensor)
    return inputs


def _refused(call: object, **kwargs: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call(**kwargs)  # type: ignore[operator]
    return caught.value


def test_http_inference_needs_the_header_and_a_tenant_key(
    restricted_mesh: tuple[Mesh, str],
) -> None:
    mesh, _ = restricted_mesh
    client = httpclient.InferenceServerClient(mesh.url)
    infer = lambda **kw: client.infer("simple", _inputs(httpclient), **kw)  # noqa: E731
    refused = _refused(infer)
    assert (refused.status(), refused.message()) == ("403", HTTP_REFUSAL.format("infer-key"))
    wrong = _refused(infer, headers={"infer-key": "I-SECRET"})
    assert (wrong.status(), wrong.message()) == ("403", HTTP_REFUSAL.format("infer-key"))
    keyless = _refused(infer, headers=INFER)
    assert keyless.status() == "401" and "requires an API key" in keyless.message()
    both = {**INFER, "Authorization": f"Bearer {TENANT_KEY}"}
    result = retrying_sync(lambda: infer(headers=both), 10, errors=InferenceServerException)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2))


def test_http_other_categories(restricted_mesh: tuple[Mesh, str]) -> None:
    mesh, _ = restricted_mesh
    client = httpclient.InferenceServerClient(mesh.url)
    assert client.is_server_ready() and client.get_model_metadata("simple")["name"] == "simple"
    refused = _refused(client.get_model_config, model_name="simple")
    assert (refused.status(), refused.message()) == ("403", HTTP_REFUSAL.format("admin-key"))
    assert client.get_model_config("simple", headers=ADMIN)["max_batch_size"] == 8
    # Conch's admin API is model-repository: its token and the header both apply.
    base = f"http://{mesh.url}/v2/admin/tenants"
    bearer = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    no_header = httpx.get(base, headers=bearer)
    assert no_header.status_code == 403
    assert no_header.json() == {"error": HTTP_REFUSAL.format("admin-key")}
    assert httpx.get(base, headers={**bearer, **ADMIN}).status_code == 200
    assert httpx.get(base, headers=ADMIN).status_code == 401
    # Routes answered by Litestar (generate) refuse as the fast path does.
    generate = httpx.post(f"http://{mesh.url}/v2/models/simple/generate", json={})
    assert generate.status_code == 403
    assert generate.json() == {"error": HTTP_REFUSAL.format("infer-key")}


def test_grpc_categories_and_keys(restricted_mesh: tuple[Mesh, str]) -> None:
    _, url = restricted_mesh
    client = grpcclient.InferenceServerClient(url)
    infer = lambda **kw: client.infer("simple", _inputs(grpcclient), **kw)  # noqa: E731
    refused = _refused(infer)
    assert refused.status() == "StatusCode.UNAVAILABLE"
    assert refused.message() == GRPC_REFUSAL.format("infer-key")
    keyless = _refused(infer, headers=GRPC_INFER)
    assert keyless.status() == "StatusCode.UNAUTHENTICATED"
    result = infer(headers={**GRPC_INFER, "authorization": f"Bearer {TENANT_KEY}"})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))
    # Health is restricted on gRPC only (HTTP probes stay open).
    live = _refused(client.is_server_live)
    assert (live.status(), live.message()) == (
        "StatusCode.UNAVAILABLE",
        GRPC_REFUSAL.format("health-key"),
    )
    assert client.is_server_ready(headers=GRPC_HEALTH)
    assert client.get_model_config("simple")  # model-config is restricted on HTTP only
    assert client.get_server_metadata().name


def test_grpc_stream_is_refused_before_its_first_message(
    restricted_mesh: tuple[Mesh, str],
) -> None:
    _, url = restricted_mesh
    client = grpcclient.InferenceServerClient(url)
    errors: list[InferenceServerException] = []
    client.start_stream(callback=lambda result, error: errors.append(error))
    try:
        client.async_stream_infer("simple", _inputs(grpcclient))
    except InferenceServerException as exc:
        # The refusal can end the stream before the request is queued: the client says so,
        # and the refusal itself reaches the callback as it does otherwise.
        assert "no longer in valid state" in exc.message()
    client.stop_stream()
    assert [(e.status(), e.message()) for e in errors] == [
        ("StatusCode.UNAVAILABLE", GRPC_REFUSAL.format("infer-key"))
    ]


def test_the_container_probe_sends_the_health_restriction(
    restricted_mesh: tuple[Mesh, str],
) -> None:
    """compose's healthcheck (``python -m gateway.grpc.health``) reads the gateway's own
    settings: with the restriction it sends the header and passes; without it, it is refused."""
    _, url = restricted_mesh
    env = {**os.environ, "CONCH_GATEWAY_GRPC_PORT": url.rpartition(":")[2]}
    probe = [sys.executable, "-m", "gateway.grpc.health"]
    refused = subprocess.run(probe, env=env, cwd=ROOT, capture_output=True, text=True, timeout=10)
    assert refused.returncode == 1 and GRPC_REFUSAL.format("health-key") in refused.stderr
    env["CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL"] = "health:health-key=h-secret"
    assert subprocess.run(probe, env=env, cwd=ROOT, timeout=10).returncode == 0

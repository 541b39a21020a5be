"""Compression as tritonclient asks for it, counted on the wire (tests/tcp_proxy.py between the
client and the gateway): HTTP responses compressed when Accept-Encoding asks (gzip, deflate; the
binary tensor extension's header length still right), compressed request bodies, gRPC responses
at Triton's --grpc-infer-response-compression-level, and gRPC requests a client compresses."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from tests.mesh import Mesh, flush_database, write_example_models
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.e2e

# add_sub: FP32 [-1, 16], batches up to 64; zeros compress to almost nothing.
ZEROS = np.zeros((64, 16), dtype=np.float32)


@dataclass
class Gateways:
    mesh: Mesh
    http: int  # HTTP port of a gateway (no gRPC compression level)
    grpc_plain: int  # gRPC port of that gateway
    grpc_high: int  # gRPC port of a second gateway, at compression level "high"


@pytest.fixture(scope="module")
def gateways(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateways]:
    flush_database(redis_server.url)
    repository = tmp_path_factory.mktemp("compression_models")
    write_example_models(repository, "add_sub")
    mesh = Mesh(redis_server.url, repository, log_dir=tmp_path_factory.mktemp("compression_logs"))
    plain, high, second_http = free_port(), free_port(), free_port()
    try:
        mesh.start_scheduler()
        mesh.start_worker()
        mesh.start_gateway(processes=1, CONCH_GATEWAY_GRPC_PORT=str(plain))
        mesh.start_gateway(
            processes=1,
            name="gateway-high",
            CONCH_GATEWAY_HTTP_PORT=str(second_http),
            CONCH_GATEWAY_GRPC_PORT=str(high),
            CONCH_GATEWAY_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL="high",
        )
        mesh.wait_ready(["add_sub"], urls=[f"http://{mesh.url}", f"http://127.0.0.1:{second_http}"])
        yield Gateways(mesh, mesh.http_port, plain, high)
    finally:
        mesh.stop()


def _inputs(module: object, binary: bool) -> list[object]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, list(ZEROS.shape), "FP32")  # type: ignore[attr-defined]
        if binary:
            tensor.set_data_from_numpy(ZEROS)
        else:
            tensor.set_data_from_numpy(ZEROS, binary_data=False)
        inputs.append(tensor)
    return inputs


def _outputs(binary: bool) -> list[httpclient.InferRequestedOutput]:
    return [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]


def _wire(proxy: TcpProxy, call: object) -> tuple[int, int, object]:
    """Bytes up and down the wire for one call (on a connection already open), and its value."""
    up, down = proxy.bytes_up, proxy.bytes_down
    value = call()  # type: ignore[operator]
    return proxy.bytes_up - up, proxy.bytes_down - down, value


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_http_responses_compressed_when_asked(gateways: Gateways, binary: bool) -> None:
    with TcpProxy("127.0.0.1", gateways.http) as proxy:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
        assert client.is_server_live()  # the connection is open before counting

        def infer(algorithm: str | None) -> object:
            return lambda: client.infer(
                "add_sub",
                _inputs(httpclient, binary),
                outputs=_outputs(binary),
                response_compression_algorithm=algorithm,
            )

        _, plain, result = _wire(proxy, infer(None))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ZEROS)  # type: ignore[attr-defined]
        for algorithm in ("gzip", "deflate"):
            _, packed, result = _wire(proxy, infer(algorithm))
            assert packed < plain / 4, (algorithm, packed, plain)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), ZEROS)  # type: ignore[attr-defined]
        client.close()


def test_http_request_bodies_compressed_by_the_client(gateways: Gateways) -> None:
    with TcpProxy("127.0.0.1", gateways.http) as proxy:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
        assert client.is_server_live()
        sizes = {}
        for algorithm in (None, "gzip", "deflate"):
            sizes[algorithm], _, result = _wire(
                proxy,
                lambda a=algorithm: client.infer(
                    "add_sub", _inputs(httpclient, False), request_compression_algorithm=a
                ),
            )
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ZEROS)  # type: ignore[attr-defined]
        assert sizes["gzip"] < sizes[None] / 4 and sizes["deflate"] < sizes[None] / 4, sizes
        client.close()


def test_binary_header_length_is_the_uncompressed_json(gateways: Gateways) -> None:
    """Triton's Inference-Header-Content-Length names the JSON header in the inflated body."""
    body = {
        "inputs": [
            {"name": n, "shape": [64, 16], "datatype": "FP32", "data": ZEROS.ravel().tolist()}
            for n in ("INPUT0", "INPUT1")
        ],
        "parameters": {"binary_data_output": True},
    }
    with httpx.Client(headers={"accept-encoding": "gzip"}) as http:
        raw = http.stream(
            "POST", f"http://127.0.0.1:{gateways.http}/v2/models/add_sub/infer", json=body
        )
        with raw as response:
            packed = b"".join(response.iter_raw())
            headers = response.headers
    assert headers["content-encoding"] == "gzip"
    assert int(headers["content-length"]) == len(packed)
    inflated = gzip.decompress(packed)
    length = int(headers["inference-header-content-length"])
    header = json.loads(inflated[:length])
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]
    assert len(inflated) == length + sum(sizes) == length + 2 * ZEROS.nbytes


def test_only_inference_is_compressed_as_in_triton(gateways: Gateways) -> None:
    """Triton compresses inference answers only; tritonclient's asyncio client relies on it: it
    sends aiohttp's ``Accept-Encoding: gzip, deflate`` on every call and inflates only
    inference answers (a compressed config answer failed it with a UnicodeDecodeError)."""
    base = f"http://127.0.0.1:{gateways.http}"
    with httpx.Client(headers={"accept-encoding": "gzip, deflate"}) as http:
        for path in ("/v2/models/add_sub/config", "/v2/models/add_sub/stats", "/v2"):
            answer = http.get(f"{base}{path}")
            assert answer.status_code == 200 and "content-encoding" not in answer.headers, path

    async def through_aio() -> tuple[dict[str, object], dict[str, object], object]:
        client = aiohttpclient.InferenceServerClient(f"127.0.0.1:{gateways.http}")
        try:
            config = await client.get_model_config("add_sub")
            stats = await client.get_inference_statistics("add_sub")
            result = await client.infer("add_sub", _inputs(aiohttpclient, True))
            return config, stats, result.as_numpy("OUTPUT0")
        finally:
            await client.close()

    config, stats, output = asyncio.run(through_aio())
    assert config["max_batch_size"] == 64 and stats["model_stats"]
    assert output is not None


def _grpc_infer(client: grpcclient.InferenceServerClient, algorithm: str | None) -> object:
    return lambda: client.infer(
        "add_sub", _inputs(grpcclient, True), compression_algorithm=algorithm
    )


def test_grpc_responses_compressed_at_the_level_set(gateways: Gateways) -> None:
    down = {}
    for name, port in (("none", gateways.grpc_plain), ("high", gateways.grpc_high)):
        with TcpProxy("127.0.0.1", port) as proxy:
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
            assert client.is_server_live()
            _, down[name], result = _wire(proxy, _grpc_infer(client, None))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ZEROS)  # type: ignore[attr-defined]
            client.close()
    assert down["high"] < down["none"] / 4, down


def test_grpc_requests_compressed_by_the_client(gateways: Gateways) -> None:
    with TcpProxy("127.0.0.1", gateways.grpc_plain) as proxy:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}")
        assert client.is_server_live()
        up = {}
        for algorithm in (None, "gzip", "deflate"):
            up[algorithm], _, result = _wire(proxy, _grpc_infer(client, algorithm))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), ZEROS)  # type: ignore[attr-defined]
        client.close()
    assert up["gzip"] < up[None] / 4 and up["deflate"] < up[None] / 4, up

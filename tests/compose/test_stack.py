"""What compose.yaml promises, read from the live containers, and the stack's own Prometheus."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.compose.conftest import all_healthy, compose, containers, inspect, wait_for

# Services built from this repository's Dockerfiles (the cpu profile's).
CONCH = [
    "controlplane",
    "envoy",
    "gateway-1",
    "gateway-2",
    "scheduler",
    "worker-python",
    "worker-onnxruntime",
    "worker-pytorch",
]


def test_every_service_is_running_and_healthy() -> None:
    running = set(compose("ps", "--services", "--status", "running").split())
    assert set(CONCH) | {"redis", "prometheus"} <= running
    wait_for("every container healthy", all_healthy, timeout=60)


@pytest.mark.parametrize("service", CONCH)
def test_conch_containers_are_locked_down(service: str) -> None:
    (container,) = containers(service)
    info = inspect(container)
    user = info["Config"]["User"]
    assert user and user.split(":")[0] not in ("", "0", "root"), user
    host = info["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host.get("CapAdd")
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["RestartPolicy"]["Name"] == "unless-stopped"
    assert info["State"]["Health"]["Status"] == "healthy"
    # The process really runs as that user, with no effective capabilities.
    status = Path(f"/proc/{info['State']['Pid']}/status").read_text()
    uid = next(line for line in status.splitlines() if line.startswith("Uid:")).split()
    assert uid[1:] == ["10001"] * 4, uid
    cap_eff = next(line for line in status.splitlines() if line.startswith("CapEff:"))
    assert int(cap_eff.split()[1], 16) == 0, cap_eff
    assert (
        next(line for line in status.splitlines() if line.startswith("NoNewPrivs:")).split()[1]
        == "1"
    )


def _query(prometheus_url: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def test_prometheus_has_every_conch_target_up(prometheus_url: str) -> None:
    expected = {
        "conch-gateway": 2,
        "conch-scheduler": 1,
        "conch-worker": 3,  # python, onnxruntime, pytorch
        "conch-controlplane": 1,
        "envoy": 1,
        "prometheus": 1,
    }

    def all_up() -> bool:
        with urllib.request.urlopen(
            f"{prometheus_url}/api/v1/targets?state=active", timeout=10
        ) as r:
            targets = json.load(r)["data"]["activeTargets"]
        up: dict[str, int] = {}
        for t in targets:
            if t["health"] == "up":
                up[t["labels"]["job"]] = up.get(t["labels"]["job"], 0) + 1
        return all(up.get(job, 0) >= n for job, n in expected.items())

    wait_for("every Conch target up in Prometheus", all_up, timeout=90, pause=3)


def test_prometheus_has_the_nv_series_of_the_load(http_url: str, prometheus_url: str) -> None:
    client = httpclient.InferenceServerClient(http_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(20):
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        for i in inputs:
            i.set_data_from_numpy(a)
        client.infer("simple", inputs)

    def counted() -> bool:
        series = _query(prometheus_url, 'sum(nv_inference_request_success{model="simple"})')
        return bool(series) and float(series[0]["value"][1]) >= 20

    wait_for("nv_inference_request_success of simple in Prometheus", counted, timeout=60, pause=3)
    for name in (
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
    ):
        assert _query(prometheus_url, f'{name}{{model="simple"}}'), name

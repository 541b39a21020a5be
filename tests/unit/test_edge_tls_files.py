"""The control plane's edge TLS: the files it watches and the resources it builds from them."""

from __future__ import annotations

import shutil
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from conch.arguments import parser
from conch.edge_up import edge_tls as tls_from_args
from conch.envoy_edge import plan_edge
from conch.up_args import UsageError, resolve
from controlplane import edge_tls, resources
from controlplane.settings import ControlPlaneSettings
from controlplane.snapshot import validate
from tests.certificates import Pki, issue, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _settings(tmp_path: Path, pki: Pki, mutual: bool = True) -> ControlPlaneSettings:
    cert, key = tmp_path / "edge.crt", tmp_path / "edge.key"
    shutil.copyfile(pki.server.cert_path, cert)
    shutil.copyfile(pki.server.key_path, key)
    return ControlPlaneSettings.from_env(
        {},
        edge_tls_cert=str(cert),
        edge_tls_key=str(key),
        edge_tls_root_cert=str(pki.ca.cert_path),
        edge_tls_mutual=mutual,
        grpc_listener_port=18081,
    )


def test_listeners_name_the_secrets_sent_over_ads(tmp_path: Path, pki: Pki) -> None:
    settings = _settings(tmp_path, pki)
    files = edge_tls.CertificateFiles(settings)
    built: Mapping[str, Mapping[str, Any]] = resources.build(settings, set(), set(), files.current)
    validate(built)  # type: ignore[arg-type]  # Envoy's own rules (protoc-gen-validate) and the cross-references
    assert set(built[edge_tls.SECRET]) == {edge_tls.CERTIFICATE_SECRET, edge_tls.VALIDATION_SECRET}
    for listener in built[resources.LISTENER].values():
        socket = listener.filter_chains[0].transport_socket
        context = tls_pb2.DownstreamTlsContext()
        assert socket.typed_config.Unpack(context)
        assert context.require_client_certificate.value
        common = context.common_tls_context
        assert common.tls_certificate_sds_secret_configs[0].name == edge_tls.CERTIFICATE_SECRET
        assert common.tls_certificate_sds_secret_configs[0].sds_config.HasField("ads")
        assert common.validation_context_sds_secret_config.name == edge_tls.VALIDATION_SECRET
        assert list(common.alpn_protocols) == ["h2", "http/1.1"]
    secret = built[edge_tls.SECRET][edge_tls.CERTIFICATE_SECRET]
    assert secret.tls_certificate.certificate_chain.inline_string.encode() == (
        pki.server.cert_path.read_bytes()
    )


def test_without_tls_nothing_changes(tmp_path: Path) -> None:
    settings = ControlPlaneSettings.from_env({})
    assert not edge_tls.enabled(settings)
    built: Mapping[str, Mapping[str, Any]] = resources.build(settings, set())
    assert built[edge_tls.SECRET] == {}
    assert not built[resources.LISTENER]["conch_http"].filter_chains[0].HasField("transport_socket")


def test_a_half_written_rotation_keeps_the_old_pair(tmp_path: Path, pki: Pki) -> None:
    settings = _settings(tmp_path, pki)
    files = edge_tls.CertificateFiles(settings)
    first = files.current
    assert not files.poll()  # nothing changed
    new = issue(pki.ca, tmp_path, "rotated", "rotated", server=True)
    shutil.copyfile(new.key_path, settings.edge_tls_key)  # the key alone: no pair
    assert not files.poll()
    assert files.current == first
    shutil.copyfile(new.cert_path, settings.edge_tls_cert)
    assert files.poll()
    assert files.current.cert == new.cert_path.read_bytes()
    assert not files.poll()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"edge_tls_key": ""}, "CONCH_CONTROLPLANE_EDGE_TLS_KEY"),
        ({"edge_tls_root_cert": ""}, "CONCH_CONTROLPLANE_EDGE_TLS_ROOT_CERT"),
        ({"edge_tls_cert": "/nonexistent.crt"}, "CONCH_CONTROLPLANE_EDGE_TLS_CERT"),
    ],
)
def test_settings_that_cannot_work_are_named(
    tmp_path: Path, pki: Pki, change: dict[str, str], named: str
) -> None:
    settings = _settings(tmp_path, pki)
    broken = ControlPlaneSettings.from_env(
        {}, **{**{f: getattr(settings, f) for f in settings.__struct_fields__}, **change}
    )
    with pytest.raises(edge_tls.CertificateError, match=named):
        edge_tls.CertificateFiles(broken)


def test_a_key_of_another_certificate_is_refused(tmp_path: Path, pki: Pki) -> None:
    settings = _settings(tmp_path, pki)
    shutil.copyfile(pki.client.key_path, settings.edge_tls_key)
    with pytest.raises(edge_tls.CertificateError, match="not a PEM certificate and its key"):
        edge_tls.CertificateFiles(settings)


def test_conch_up_flags_become_the_control_planes_settings(tmp_path: Path) -> None:
    """``--envoy-server-cert`` and friends (read with getattr: ``conch up`` may predate them)."""
    assert tls_from_args(Namespace()) is None
    args = Namespace(
        envoy_server_cert="edge.crt",
        envoy_server_key="edge.key",
        envoy_root_cert="ca.pem",
        envoy_use_ssl_mutual=True,
    )
    tls = tls_from_args(args)
    assert tls is not None
    plan = plan_edge(
        "redis://127.0.0.1:6379/0", 18443, workdir=tmp_path, envoy_path="envoy", tls=tls
    )
    env = plan.controlplane.env
    assert env["CONCH_CONTROLPLANE_EDGE_TLS_CERT"] == str(Path("edge.crt").resolve())
    assert env["CONCH_CONTROLPLANE_EDGE_TLS_KEY"] == str(Path("edge.key").resolve())
    assert env["CONCH_CONTROLPLANE_EDGE_TLS_ROOT_CERT"] == str(Path("ca.pem").resolve())
    assert env["CONCH_CONTROLPLANE_EDGE_TLS_MUTUAL"] == "true"
    assert plan.public_url == "https://127.0.0.1:18443"


@pytest.mark.parametrize("flag", ["--http-use-ssl", "--grpc-use-ssl"])
def test_conch_up_refuses_gateway_tls_behind_its_envoy(pki: Pki, flag: str) -> None:
    """Envoy reaches the gateways in the clear: gateway TLS behind it would leave the edge
    answering 503, so the start-up line is refused, naming the edge's flags instead."""
    protocol = flag.split("-")[2]
    argv = [
        "up",
        "--model-repository=/models",
        flag,
        f"--{protocol}-server-cert={pki.server.cert_path}",
        f"--{protocol}-server-key={pki.server.key_path}",
    ]
    resolve(parser().parse_args(argv))  # without --with-envoy: the gateway serves TLS
    with pytest.raises(UsageError, match="--envoy-server-cert"):
        resolve(parser().parse_args([*argv, "--with-envoy"]))

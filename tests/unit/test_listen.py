"""Exclusive listening ports (shared.runtime.listen) and conch up's port plan (conch.port_plan)."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

import pytest

from conch.port_plan import clash, ports_of
from conch.ports import free_port
from shared.runtime.listen import (
    PortError,
    PortInUse,
    bind_listener,
    check_free,
    holder,
    listening_inodes,
)


def _args(**overrides: object) -> argparse.Namespace:
    values = {
        "http_port": 8000,
        "grpc_port": 8001,
        "host": "127.0.0.1",
        "with_envoy": False,
        "envoy_port": 8080,
        "envoy_grpc_port": 8081,
        "with_prometheus": False,
        "prometheus_port": 9090,
    } | overrides
    return argparse.Namespace(**values)


def test_a_bound_listener_cannot_be_joined_even_with_so_reuseport() -> None:
    """The issue's clash: with SO_REUSEPORT on both sides the kernel shared the port."""
    sock = bind_listener("127.0.0.1", 0, "HTTP", "--http-port")
    port = sock.getsockname()[1]
    assert sock.get_inheritable() is True  # the gateway's processes serve it by its fd
    try:
        stranger = socket.socket()
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError), stranger:
            stranger.bind(("127.0.0.1", port))
        with pytest.raises(PortInUse) as taken:
            bind_listener("0.0.0.0", port, "gRPC", "--grpc-port")
    finally:
        sock.close()
    message = str(taken.value)
    assert message.startswith(f"port {port} (gRPC) is already in use by pid {os.getpid()} (")
    assert message.endswith("; choose another port with --grpc-port")


def test_check_free_names_the_holder_and_leaves_a_free_port_free() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(PortInUse) as taken:
            check_free("127.0.0.1", port, "Envoy", "--envoy-port")
        assert taken.value.holder is not None and str(os.getpid()) in taken.value.holder
    check_free("127.0.0.1", port, "Envoy", "--envoy-port")  # released: free again
    bind_listener("127.0.0.1", port, "Envoy", "--envoy-port").close()


def test_an_address_this_host_lacks_is_not_called_in_use() -> None:
    with pytest.raises(PortError) as refused:
        check_free("192.0.2.1", 8000, "HTTP", "--http-port")  # TEST-NET-1: on no host
    assert not isinstance(refused.value, PortInUse)
    assert "is on an address this host does not have" in str(refused.value)


def test_listening_inodes_and_holder_read_proc(tmp_path: Path) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"  # noqa: E501
    rows = [
        "   0: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n",  # noqa: E501
        "   1: 0100007F:1F41 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n",  # noqa: E501
        "   2: 0100007F:1F42 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1\n",  # noqa: E501
    ]
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text(header + "".join(rows))
    (tmp_path / "net" / "tcp6").write_text(header)
    assert listening_inodes(8001, tmp_path) == {"111"}  # the established one is no listener
    fd_dir = tmp_path / "4242" / "fd"
    fd_dir.mkdir(parents=True)
    os.symlink("socket:[111]", fd_dir / "7")
    (tmp_path / "4242" / "cmdline").write_bytes(b"python\0-m\0gateway\0")
    assert holder(8001, tmp_path) == "pid 4242 (python -m gateway)"
    assert holder(8002, tmp_path) == "another user's process"  # listed, but no fd we can read
    assert holder(8003, tmp_path) is None


def test_conch_up_refuses_two_roles_on_one_port_naming_both_flags() -> None:
    said = clash(ports_of(_args(http_port=8001)))
    assert said is not None
    assert said.startswith("--http-port and --grpc-port are both 8001")
    assert "8001 is the default of --grpc-port" in said
    said = clash(ports_of(_args(http_port=18080, with_envoy=True, envoy_port=18080)))
    assert said is not None and said.startswith("--http-port and --envoy-port are both 18080")
    assert "default" not in said
    # No gRPC at all: the number is free for HTTP.
    assert [u.flag for u in ports_of(_args(grpc_port=0))] == ["--http-port"]


def test_conch_up_refuses_a_port_in_use_with_its_flag() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        # The HTTP port: one free a moment ago (port + 1 may belong to another mesh here).
        said = clash(ports_of(_args(grpc_port=port, http_port=free_port())))
    assert said is not None and f"port {port} (gRPC) is already in use" in said
    assert said.endswith("--grpc-port")

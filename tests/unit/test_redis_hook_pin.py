"""shared/runtime/redis_conn.py replaces redis-py's ``Connection.pack_command``: these fail when the
installed redis-py is not the release that hook was checked against, or the method is gone, so
that an upgrade is a deliberate act (check the hook, then move the pins)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from redis.asyncio.connection import AbstractConnection, Connection

from shared.runtime import redis_conn

ROOT = Path(__file__).resolve().parents[2]


def test_the_installed_redis_py_is_the_pinned_one() -> None:
    assert metadata.version("redis") == redis_conn.REDIS_PY_VERSION
    redis_conn.check_redis_py(metadata.version("redis"))


def test_pyproject_pins_the_release_the_hook_was_checked_against() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "redis"]
    assert [str(p.specifier) for p in pins] == [f"=={redis_conn.REDIS_PY_VERSION}"]


def test_the_hooked_method_is_still_redis_pys() -> None:
    assert callable(vars(AbstractConnection).get("pack_command"))
    assert Connection.pack_command is AbstractConnection.pack_command
    for packed in (
        redis_conn.HiredisPackedConnection,
        redis_conn.HiredisPackedUnixConnection,
        redis_conn.HiredisPackedSSLConnection,
    ):
        assert packed.pack_command is redis_conn._HiredisPacking.pack_command


def test_another_release_or_a_missing_method_is_refused_with_both_versions_named() -> None:
    with pytest.raises(redis_conn.RedisPyMismatch) as caught:
        redis_conn.check_redis_py("99.0.0")
    assert "99.0.0" in str(caught.value) and redis_conn.REDIS_PY_VERSION in str(caught.value)

    class Bare:
        pass

    with pytest.raises(redis_conn.RedisPyMismatch, match=r"Bare\.pack_command"):
        redis_conn.check_redis_py(redis_conn.REDIS_PY_VERSION, Bare)


def test_importing_the_module_fails_under_another_redis_py() -> None:
    code = (
        "from importlib import metadata\n"
        "real = metadata.version\n"
        "metadata.version = lambda name: '99.0.0' if name == 'redis' else real(name)\n"
        "import shared.runtime.redis_conn\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "RedisPyMismatch" in done.stderr and "99.0.0" in done.stderr

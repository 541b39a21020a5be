"""The gateway answers inference inside uvicorn's private ``HttpToolsProtocol._start_asgi_task``
(``gateway.http_protocol``), so it runs only on the uvicorn release the hook was written against.
These tests fail (the import first of all) when another uvicorn is installed or the hooked method
is gone: upgrading uvicorn is a deliberate act."""

from __future__ import annotations

import importlib.metadata
import inspect
from pathlib import Path

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway import http_protocol


def test_installed_uvicorn_is_the_one_the_hook_was_written_against() -> None:
    assert importlib.metadata.version("uvicorn") == http_protocol.UVICORN_VERSION


def test_the_hooked_method_is_there_with_the_signature_the_hook_overrides() -> None:
    hooked = getattr(HttpToolsProtocol, http_protocol.HOOKED_METHOD, None)
    assert callable(hooked)
    assert list(inspect.signature(hooked).parameters) == ["self", "cycle", "app"]
    override = http_protocol.InferHttpProtocol.__dict__[http_protocol.HOOKED_METHOD]
    assert list(inspect.signature(override).parameters) == ["self", "cycle", "app"]


def test_another_version_or_a_missing_method_is_refused_naming_both_versions() -> None:
    expected = http_protocol.UVICORN_VERSION
    with pytest.raises(RuntimeError) as caught:
        http_protocol.check_uvicorn("0.0.1", HttpToolsProtocol)
    assert expected in str(caught.value) and "0.0.1" in str(caught.value)
    with pytest.raises(RuntimeError, match=http_protocol.HOOKED_METHOD):
        http_protocol.check_uvicorn(expected, object)
    http_protocol.check_uvicorn(expected, HttpToolsProtocol)


def test_the_docker_constraints_pin_the_same_uvicorn() -> None:
    constraints = Path(__file__).resolve().parents[2] / "docker" / "constraints.txt"
    pins = [line.strip() for line in constraints.read_text().splitlines()]
    assert f"uvicorn=={http_protocol.UVICORN_VERSION}" in pins


def test_the_package_pins_the_same_uvicorn() -> None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    pins = [line.strip().strip('",') for line in pyproject.read_text().splitlines()]
    assert f"uvicorn=={http_protocol.UVICORN_VERSION}" in pins

"""The package's requirements and the one constraints file (docker/constraints.txt: the images'
and the dev install's exact versions) agree; the package pins one thing exactly, uvicorn,
whose private API ``gateway/rest/protocol.py`` hooks, and torch's version is written once, in the
constraints."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gateway.rest.protocol import UVICORN_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _requirements(extras: bool = True) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values() if extras else ():
        lines += extra
    return [Requirement(line) for line in lines]


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "docker/constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_images_constraints_satisfy_every_requirement_of_the_package() -> None:
    constraints = _constraints()
    disagree = [
        f"{req} vs constraints {constraints[canonicalize_name(req.name)]}"
        for req in _requirements()
        if canonicalize_name(req.name) in constraints
        and not req.specifier.contains(constraints[canonicalize_name(req.name)], prereleases=True)
    ]
    assert not disagree


def test_the_one_exact_pin_is_the_hooked_uvicorn_and_the_rest_are_ranges() -> None:
    """An exact pin in pyproject.toml makes every upgrade a code change: only the one library
    whose private API is hooked has one; the versions the suite ran with are the constraints'
    (``pip install --constraint``)."""
    constraints = _constraints()
    exact = [str(r) for r in _requirements() if any(s.operator == "==" for s in r.specifier)]
    assert exact == [f"uvicorn=={UVICORN_VERSION}"]
    assert constraints["uvicorn"] == UVICORN_VERSION
    for name in ("redis", "uvicorn", "httptools", "hiredis", "torch"):
        assert name in constraints, f"{name}: not in docker/constraints.txt"


def test_torch_is_pinned_once_in_the_constraints_not_in_the_dockerfiles() -> None:
    for dockerfile in (ROOT / "docker").glob("*.Dockerfile"):
        text = dockerfile.read_text()
        assert "torch==" not in text and "TORCH_VERSION" not in text, dockerfile.name

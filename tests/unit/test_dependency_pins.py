"""The package's requirements and the images' constraints (docker/constraints.txt) agree, and
the exact pins (private APIs hooked: see pyproject.toml) are what is installed."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


def test_exact_pins_are_the_installed_versions_and_the_images_versions() -> None:
    constraints = _constraints()
    # The package's own dependencies: installed wherever Conch is (extras may be absent).
    exact = [r for r in _requirements(False) if any(s.operator == "==" for s in r.specifier)]
    assert {"redis", "uvicorn", "httptools"} <= {canonicalize_name(r.name) for r in exact}
    for req in exact:
        (pin,) = [s.version for s in req.specifier if s.operator == "=="]
        assert metadata.version(req.name) == pin, f"{req.name}: installed vs pyproject.toml"
        assert constraints[canonicalize_name(req.name)] == pin, f"{req.name}: constraints.txt"

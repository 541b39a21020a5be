"""`conch bench` finds everything it runs inside the project (bench/harness).

It once ran the workspace's shared harness beside the repository (../shared/bench), so a plain
clone could not benchmark; these checks keep every path it, its peers and the scripts around it
use pointing into the project, and the harness in the wheel (package data).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from bench import HARNESS, peers
from bench.cells import parse_cells

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_is_in_the_project() -> None:
    assert HARNESS == ROOT / "bench" / "harness"
    for name in ("load.sh", "infer.lua", "payload.py", "check.py", "common.py", "setup.sh"):
        assert (HARNESS / name).is_file(), name
    assert (HARNESS / "make_models.py").is_file()


def test_the_peers_runtimes_are_in_the_project(tmp_path: Path) -> None:
    """`conch bench --peers mlserver,ray` starts scripts of bench/harness, run with bash."""
    cells = parse_cells("mlp:1,mlp:64")
    for peer in peers.KNOWN:
        for config, _ in peers.grouped(peer, cells, HARNESS, 8080, tmp_path):
            assert config.argv[0] == "bash"
            assert Path(config.argv[1]).is_file(), config.argv[1]
            assert Path(config.argv[1]).is_relative_to(HARNESS)
        assert f"bash {HARNESS}" in (peers.missing_install(peer, tmp_path, HARNESS) or "")
    assert (HARNESS / "rayserve_runtime" / "install.sh").is_file()


def test_nothing_points_outside_the_project_for_the_harness() -> None:
    outside = re.compile(r"\.\./shared/bench|shared\s*/\s*\"?bench|/work/shared")
    users = [*(ROOT / "bench").glob("*.py"), ROOT / "bench" / "alternate.sh"]
    users.append(ROOT / "tests" / "netns_bench.py")
    for path in users:
        assert not outside.search(path.read_text()), path


def test_every_harness_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["bench"]
    files = [
        p
        for p in HARNESS.rglob("*")
        if p.is_file()
        and not any(part.startswith((".", "__")) for part in p.relative_to(HARNESS).parts)
    ]
    assert files
    for path in files:
        relative = path.relative_to(ROOT / "bench").as_posix()
        assert any(
            fnmatch.fnmatch(relative, pattern) and relative.count("/") == pattern.count("/")
            for pattern in patterns
        ), relative

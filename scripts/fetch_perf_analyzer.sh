#!/usr/bin/env bash
# perf_analyzer for the statistics check (tests/e2e/test_perf_analyzer_stats.py): the binary the
# tritonclient 2.40.0 wheel carries, Debian's libb64-0d and the nvidia-cuda-runtime-cu12 wheel's
# libcudart.so.12 (it links it; no GPU is used). Installs into .conch/perf_analyzer/{bin,lib}
# (or $1); the test finds it there or where CONCH_PERF_ANALYZER_DIR points.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/.conch/perf_analyzer}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$dest/bin" "$dest/lib"
"$root/.venv/bin/pip" download --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
    -d "$work" tritonclient==2.40.0 nvidia-cuda-runtime-cu12
# apt-get download needs the package lists; a fresh machine may have none yet.
(cd "$work" && apt-get download libb64-0d 2>/dev/null) \
    || { ${SUDO:-} apt-get update -qq && (cd "$work" && apt-get download libb64-0d); }
unzip -qjo "$work"/tritonclient-2.40.0-*.whl 'tritonclient-2.40.0.data/data/bin/perf_analyzer' -d "$dest/bin"
unzip -qjo "$work"/nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$dest/lib"
dpkg-deb -x "$work"/libb64-0d_*.deb "$work/b64"
cp "$work"/b64/usr/lib/x86_64-linux-gnu/libb64.so.0d "$dest/lib/"
chmod +x "$dest/bin/perf_analyzer"
echo "perf_analyzer in $dest/bin (libraries in $dest/lib)"

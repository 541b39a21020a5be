#!/usr/bin/env bash
# Two Conch meshes side by side, measured in alternating wrk windows: how docs/performance.md
# compares two versions of the code or two settings on a machine whose speed drifts by 10-20 %
# between minutes. The idle mesh uses no CPU while the other is measured.
#
#   bench/alternate.sh ROUNDS DIR_A DIR_B [ENV_A] [ENV_B]
#     DIR_A/DIR_B: checkouts of Conch (e.g. `git worktree add /tmp/a HEAD~1` and .); both run
#     with this checkout's .venv and PYTHONPATH pointing at their own tree.
#     ENV_A/ENV_B: extra environment, e.g. "CONCH_SCHEDULER_QUEUED_BATCHES_PER_INSTANCE=1".
#   Environment: CELLS ("mlp:64:json mlp:64:binary"), SECS (8), REPO (the harness's repository),
#   HARNESS (bench/harness: the benchmark harness whose load.sh measures),
#   ARGS_A/ARGS_B (extra `conch up` flags), BENCH_ROOT (/tmp/conch-bench), PORT_A/PORT_B (18810,
#   18820: HTTP ports of the two meshes, their gRPC ports one above; other ones let two runs
#   share a machine).
# Prints one line per window (side, cell, req/s, p50, p99, errors, machine cores, and the side's
# own server CPU per request in us: every process of its mesh from /proc, then gateway, scheduler,
# worker and redis alone) and the means.
set -euo pipefail
for dir in "$2" "$3"; do [ -d "$dir" ] || { echo "alternate.sh: no checkout at $dir" >&2; exit 2; }; done
rounds=$1 dir_a=$(cd "$2" && pwd) dir_b=$(cd "$3" && pwd) env_a=${4:-} env_b=${5:-}
here=$(cd "$(dirname "$0")/.." && pwd)
harness=${HARNESS:-$here/bench/harness}  # the project's copy of the harness, unless told
export BENCH_ROOT=${BENCH_ROOT:-/tmp/conch-bench}
repo=${REPO:-$BENCH_ROOT/repo}
pids=()
start() {  # dir port env args
  # `python -m conch` since the CLI got its own package; older checkouts ran it from shared.cli.
  local cli=conch; [ -d "$1/conch" ] || cli=shared.cli
  (cd "$1" && exec env PYTHONPATH="$1" $3 "$here/.venv/bin/python" -m "$cli" up --model-repository "$repo" \
    --http-port "$2" --grpc-port $(($2 + 1)) $4 > "/tmp/conch-alternate-$2.log" 2>&1) &
  pids+=($!)
}
trap 'kill -INT "${pids[@]}" 2>/dev/null; wait' EXIT
port_a=${PORT_A:-18810} port_b=${PORT_B:-18820}
start "$dir_a" "$port_a" "$env_a" "${ARGS_A:-}"
start "$dir_b" "$port_b" "$env_b" "${ARGS_B:-}"
for port in "$port_a" "$port_b"; do
  for _ in $(seq 120); do curl -sf "localhost:$port/v2/health/ready" > /dev/null && break; sleep 1; done
done
results=$(mktemp)
for _ in $(seq "$rounds"); do
  for cell in ${CELLS:-mlp:64:json mlp:64:binary}; do
    IFS=: read -r model conc format <<< "$cell"
    for side in A B; do
      port=$port_a; root=${pids[0]}; [ "$side" = B ] && port=$port_b && root=${pids[1]}
      before=$("$here/.venv/bin/python" "$here/bench/tree_cpu.py" "$root")
      FORMAT=$format WARMUP=2 CHECK=0 bash "$harness/load.sh" "http://127.0.0.1:$port" \
        "$model" "$conc" "${SECS:-8}" \
        > "$results.window"
      after=$("$here/.venv/bin/python" "$here/bench/tree_cpu.py" "$root")
      python3 -c "import json,sys; d=json.load(open('$results.window')); n=max(1, d['requests'] + d['rps'] * 2); b='$before'.split(); a='$after'.split(); print('$side', '$cell', d['rps'], d['p50_ms'], d['p99_ms'], d['errors'], d['machine_cpu'], *(round(1e6 * (float(y) - float(x)) / n, 1) for x, y in zip(b, a)))" \
        | tee -a "$results"
    done
  done
done
echo "side cell mean: rps p50_ms machine_cores | server CPU us per request: all gateway scheduler worker redis"
awk '{k=$1" "$2; r[k]+=$3; p[k]+=$4; c[k]+=$7; for (i=8; i<=12; i++) u[k,i]+=$i; n[k]++} END {for (k in r) printf "%s %.0f %.2f %.2f | %.1f %.1f %.1f %.1f %.1f\n", k, r[k]/n[k], p[k]/n[k], c[k]/n[k], u[k,8]/n[k], u[k,9]/n[k], u[k,10]/n[k], u[k,11]/n[k], u[k,12]/n[k]}' "$results" | sort

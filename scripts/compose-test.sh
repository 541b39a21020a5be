#!/usr/bin/env bash
# `make compose-test`: the README's compose section, run for real and tested end to end.
#   1. a Docker engine with Compose v2 (scripts/compose-engine.sh),
#   2. the base images: pulled, or built as Debian stand-ins (scripts/compose-bases.sh),
#   3. docker compose --profile base build base; docker compose --profile cpu build,
#   4. docker compose --profile cpu up -d --wait,
#   5. pytest tests/compose against the published ports (CONCH_COMPOSE_STACK=1),
#   6. always: docker compose --profile cpu down -v.
# The example model repository must exist (make models). Environment (all optional):
#   CONCH_BUILD_CA          a PEM the builds' pip trusts too (default: the host's bundle, where
#                           it has one: TLS-intercepting networks need it, others lose nothing)
#   CONCH_TORCH_INDEX_URL   torch's index (default: PyTorch's CPU index, or PyPI where that
#                           index is unreachable)
#   CONCH_COMPOSE_KEEP=1    leave the stack up at the end (for debugging; not in CI)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-conch}
export CONCH_ADMIN_TOKEN=${CONCH_ADMIN_TOKEN:-compose-test-$RANDOM$RANDOM}
export COMPOSE_PROGRESS=${COMPOSE_PROGRESS:-plain}
if [ -z "${CONCH_BUILD_CA:-}" ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    export CONCH_BUILD_CA=/etc/ssl/certs/ca-certificates.crt
fi
if [ -z "${CONCH_TORCH_INDEX_URL:-}" ] \
    && ! curl -fsS -m 10 -o /dev/null https://download.pytorch.org/whl/cpu/torch/ 2>/dev/null; then
    echo "compose-test: PyTorch's index is unreachable: torch from PyPI" >&2
    export CONCH_TORCH_INDEX_URL=https://pypi.org/simple
fi
compose() { docker compose --profile cpu "$@"; }
stamp() { date +%s; }
t0=$(stamp)

[ -d examples/model_repository/simple ] || { echo "compose-test: run make models first" >&2; exit 2; }
scripts/compose-engine.sh
scripts/compose-bases.sh
t_bases=$(stamp)

# The profiles this machine cannot run stay valid configuration (no GPU, no Grafana image).
docker compose --profile gpu --profile grafana --profile redis-cluster config -q
docker compose --profile base build base
compose build
t_built=$(stamp)

finish() {
    status=$?
    if [ "$status" != 0 ]; then
        echo "compose-test: FAILED ($status); the stack as it was:" >&2
        compose ps -a >&2 || true
        compose logs --no-color --tail 40 >&2 || true
    fi
    if [ "${CONCH_COMPOSE_KEEP:-}" != 1 ]; then
        compose down -v --remove-orphans --timeout 20 >&2 || true
    fi
    exit "$status"
}
trap finish EXIT

compose up -d --wait --wait-timeout 600
t_up=$(stamp)

CONCH_COMPOSE_STACK=1 "$PY" -m pytest \
    tests/compose/test_stack.py tests/compose/test_inference.py tests/compose/test_grpc.py \
    tests/compose/test_frameworks.py tests/compose/test_ab_weights.py tests/compose/test_faults.py
t_tests=$(stamp)
echo "compose-test: engine+bases $((t_bases - t0)) s, build $((t_built - t_bases)) s," \
    "up --wait $((t_up - t_built)) s, tests $((t_tests - t_up)) s" >&2
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' 'conch/*' >&2

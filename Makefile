# The README's commands. Everything installs into .venv; nothing outside it is touched.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Every install takes its versions from the one constraints file the images use too.
CONSTRAINTS ?= docker/constraints.txt
PIP := $(PY) -m pip install --disable-pip-version-check -q --constraint $(CONSTRAINTS)
PORT ?= 8000
REPO ?= examples/model_repository
# torch's version is the constraints file's (the CPU build here; the GPU images choose theirs).
TORCH ?= torch
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up install install-test models test chaos lint bench prometheus compose-test

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

# Every backend's extra: the example repository has a model for each (the images install one).
EXTRAS ?= onnx,torch,openvino,fil,tensorflow

install: $(PY)
	$(PIP) $(TORCH)
	$(PIP) -e ".[$(EXTRAS)]"

models: install
	$(PY) examples/make_models.py $(REPO)
	$(PY) examples/make_backend_models.py $(REPO)
	$(PY) examples/make_generative_models.py $(REPO)
	$(PY) examples/make_openvino_models.py $(REPO)
	$(PY) examples/make_fil_models.py $(REPO)
	$(PY) examples/make_tensorflow_models.py $(REPO)
	$(PY) examples/make_python_backend_models.py $(REPO)

# One command: install, generate the example repository, start the whole mesh.
up: models
	$(VENV)/bin/conch up --model-repository $(REPO) --http-port $(PORT)

install-test: $(PY) prometheus
	$(PIP) $(TORCH)
	$(PIP) -e ".[$(EXTRAS),test,deploy]"
	@test -x .conch/perf_analyzer/bin/perf_analyzer || scripts/fetch_perf_analyzer.sh

# Prometheus and promtool (Debian) for the observability tests; skipped where already present.
prometheus:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# One command: install what the tests need and run them (CI runs exactly this).
# The second run: a representative subset of the e2e suite against a private 3-master,
# 3-replica Redis Cluster (docs/scaling.md); the whole e2e suite takes `--redis-cluster` too.
CLUSTER_SUBSET ?= tests/e2e/test_spine.py tests/e2e/test_grpc.py tests/e2e/test_sequences.py \
	tests/e2e/test_policy.py tests/e2e/test_front_door.py
test: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest
	$(PY) -m pytest --redis-cluster $(CLUSTER_SUBSET)

# The long forms of the chaos, fuzz and soak suites (tests/chaos, tests/fuzz; about an hour on
# 2 cores): every fault several times, thousands of hostile requests, a 100,000-request soak.
# Figures go to chaos-report.jsonl and are printed as the tables of docs/reliability.md.
CHAOS_REPORT ?= chaos-report.jsonl
chaos: install-test
	rm -f $(CHAOS_REPORT)
	CONCH_CHAOS_REPORT=$(abspath $(CHAOS_REPORT)) $(PY) -m pytest -m chaos tests/chaos tests/fuzz; \
	  status=$$?; $(PY) -m tests.chaos.report $(CHAOS_REPORT); exit $$status

lint: $(PY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The README's compose section for real (scripts/compose-test.sh): a Docker engine (installed and
# started where missing), the base images (pulled, or Debian stand-ins where no registry
# answers), every CPU image built, `docker compose --profile cpu up -d --wait`, tests/compose/
# against the published ports, and always `down -v`. Needs root or sudo where Docker is missing.
compose-test: install-test models
	scripts/compose-test.sh

"""Worker settings, from CONCH_WORKER_* (and CONCH_REDIS_URL)."""

from __future__ import annotations

from shared.fleet.control import check_mode
from shared.placement.budget import FLAG, parse_budget
from shared.runtime.settings import Settings
from shared.wire.errors import ConchError
from workers.ratelimit.resources import parse_available


class WorkerSettings(Settings, kw_only=True):
    __prefix__ = "CONCH_WORKER_"

    # The backend this worker runs (onnxruntime, python, pytorch, tensorrt...): it serves the
    # models of the repository whose configuration names it.
    backend: str = "onnxruntime"
    # The model repositories (Triton's layout: <model>/config.pbtxt, <model>/<version>): one or
    # several locations, comma-separated, each a local directory or s3://...; a model name
    # found in two is served from neither (Triton's rule).
    model_repository: str = "model_repository"
    # Triton's --model-control-mode, any case: none (load every model at start; the repository
    # API's load and unload are refused), poll (the same, and follow the repositories: added
    # and changed models load, removed ones unload) or explicit (load LOAD_MODELS at start,
    # then what the repository API asks), or Conch's on_demand (every model indexed, LOAD_MODELS
    # loaded and pinned, any other loaded on one worker when first asked for and evicted least
    # recently used to stay within MODEL_MEMORY_BUDGET). The gateways'
    # CONCH_GATEWAY_MODEL_CONTROL_MODE must match.
    model_control_mode: str = "none"
    # Explicit and on_demand modes: the models loaded at start (Triton's --load-model; "*":
    # every model), as well as those the fleet's desired state says are loaded (a load through
    # the API). In on_demand mode these are pinned: never evicted.
    load_models: list[str] = []
    # On_demand mode (--model-memory-budget): the memory the models this worker loads may take,
    # as bytes ("2GiB", "512MiB", "1500000000") or a fraction of the machine's memory, or of
    # the GPU's for a worker on a GPU ("0.5", "50%"); "": 0.5. A model that would not fit has
    # least recently used idle models unloaded first, or is placed on another worker.
    model_memory_budget: str = ""
    # Poll mode: seconds between two looks at the repositories (Triton's --repository-poll-secs).
    repository_poll_secs: float = 15.0
    # Triton's --model-config-name: read <model>/configs/<name>.pbtxt where it exists, else
    # config.pbtxt.
    model_config_name: str = ""
    # Where the local copies of remote (s3://) repositories are kept; "": the user's cache
    # directory (~/.cache/conch/repositories).
    repository_cache_dir: str = ""
    # Triton's --backend-directory, for the python worker: where Python-based backends are
    # (backend: "NAME" served by <directory>/NAME/model.py). Several directories are separated
    # by ':' or ',' and searched in order; empty: /opt/tritonserver/backends, then the example
    # backends of a Conch source checkout (examples/backends). A built-in backend's name
    # (onnxruntime, pytorch, python...) is never looked for there.
    backend_directory: str = ""
    # Names of the models to load; empty: every model of this worker's backend.
    models: list[str] = []
    # Physical ids of the GPUs this worker drives (``conch up`` pins one worker per GPU with
    # CUDA_VISIBLE_DEVICES and this); empty: every visible GPU. See workers/loading/placement.py.
    gpu_ids: list[int] = []
    # Whether this worker runs the KIND_CPU instance groups (one of a set of per-GPU workers).
    cpu_instances: bool = True
    # Address of the worker's /health/live, /health/ready and /metrics.
    health_host: str = "0.0.0.0"
    # Port of those probes and /metrics; a port in use stops the service (exit 78).
    health_port: int = 8020
    # How often the worker renews its heartbeat and its instances' readiness.
    heartbeat_interval_ms: int = 1_000
    # A worker heartbeat (and readiness) not renewed within this long expires; gateways read
    # the registry with it (CONCH_GATEWAY_WORKER_HEARTBEAT_TTL_MS must match).
    heartbeat_ttl_ms: int = 3_000
    # How often pending batches and sequences of dead workers are looked for.
    reclaim_interval_ms: int = 1_000
    # What a Redis that restarted empty forgot (configs, groups, the repository index) is put
    # back when the worker's change-feed subscription is made again, and on this safety poll.
    restore_poll_ms: int = 10_000
    # A worker is dead, and its pending batches may be claimed, once its last heartbeat is this
    # old; batches are claimed only when idle this long, and the sequences it held move to live
    # instances. Well above a 5 s freeze.
    dead_bound_ms: int = 10_000
    # A batch delivered more often than this (its workers kept dying) is answered with errors.
    max_deliveries: int = 3
    # Seconds to finish in-flight batches on SIGTERM before leaving them to another worker.
    drain_timeout_s: float = 10.0
    # Seconds between marking a version draining (gateways stop routing requests without a
    # version to it; they re-read every 250 ms) and no longer taking requests that name it.
    drain_route_delay_s: float = 0.75
    # Triton's --strict-model-config: true turns auto-complete off (every configuration must
    # list its inputs and outputs); false (Triton's default) completes them from the model.
    strict_model_config: bool = False
    # An instance whose recent executions took less than this many microseconds runs the next
    # one on the worker's event loop instead of a pool thread (``workers.batches.executions``); 0:
    # always the pool; -1 (auto): 2000 where the worker may use at most 2 CPUs, else 0.
    inline_execution_us: int = -1
    # How often a holder releases idle sequences and re-reads the sequences it holds.
    sequence_reconcile_ms: int = 500
    # Triton's --rate-limit: off (default), or execution_count: an instance executes a batch
    # only while it holds the resources its instance group's rate_limiter lists, counted
    # fleet-wide in Redis (workers/ratelimit). Every worker of a fleet must agree.
    rate_limit: str = "off"
    # Triton's --rate-limit-resource, comma-separated: <name>:<count> (every device, and a
    # global resource) or <name>:<count>:<gpu id>; a resource not named has as many copies as
    # the largest count any instance asks for.
    rate_limit_resources: list[str] = []
    # An instance renews the resources it holds every third of this; a worker that dies or
    # stalls gives them back (and its place among the waiters) once this long passed.
    rate_limit_lease_ms: int = 5_000

    def __post_init__(self) -> None:
        self.model_control_mode = check_mode(
            self.model_control_mode, "CONCH_WORKER_MODEL_CONTROL_MODE"
        )
        if self.model_memory_budget.strip():
            try:
                parse_budget(self.model_memory_budget)
            except ConchError as exc:
                why = exc.message.removeprefix(f"{FLAG}: ")
                raise ValueError(f"CONCH_WORKER_MODEL_MEMORY_BUDGET ({FLAG}): {why}") from None
        self.rate_limit = self.rate_limit.strip().lower()
        if self.rate_limit not in ("off", "execution_count"):
            raise ValueError(
                f"CONCH_WORKER_RATE_LIMIT is '{self.rate_limit}'; expected off or execution_count"
            )
        try:
            parse_available(self.rate_limit_resources)
        except ConchError as exc:
            raise ValueError(exc.message) from None
        if self.rate_limit_lease_ms < 100:
            raise ValueError(
                f"CONCH_WORKER_RATE_LIMIT_LEASE_MS is {self.rate_limit_lease_ms}; expected 100 "
                "or more"
            )
        if self.repository_poll_secs <= 0:
            raise ValueError(
                f"CONCH_WORKER_REPOSITORY_POLL_SECS is {self.repository_poll_secs}; "
                "expected a number of seconds above 0"
            )

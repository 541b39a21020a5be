"""Every start-up option of Triton's ``tritonserver``, and what ``conch up`` does with it.

Three answers: Conch implements the option (``IMPLEMENTED``: same name, same values); accepts it
only with the one value that already describes Conch (``ONLY``: ``--allow-http=true``,
``--reuse-http-port=false``, ...), refusing any other; or refuses it by name (``REFUSED``), with
the reason, so a Triton start-up line never loses a setting silently. ``conch.arguments`` builds
its refusals from this table, and ``docs/coming-from-triton.md`` lists every row (a unit test
holds both).

Longer than 300 lines because it is one table, a row per Triton option with its reason, which
reads best whole and next to the two functions that read it.
"""

from __future__ import annotations

from dataclasses import dataclass

IMPLEMENTED = "implemented"
ONLY = "only"
REFUSED = "refused"


@dataclass(frozen=True)
class TritonOption:
    name: str  # Triton's flag, without the leading dashes
    group: str  # Triton's group of options (its --help)
    status: str  # IMPLEMENTED, ONLY or REFUSED
    conch: str  # the Conch equivalent, or why Conch has none
    only: str = ""  # for ONLY: the value accepted (Triton's spelling)
    takes_value: bool = True  # False: a flag without a value (--disable-auto-complete-config)


def _i(name: str, group: str, conch: str, takes_value: bool = True) -> TritonOption:
    return TritonOption(name, group, IMPLEMENTED, conch, takes_value=takes_value)


def _only(name: str, group: str, value: str, conch: str) -> TritonOption:
    return TritonOption(name, group, ONLY, conch, only=value)


def _no(name: str, group: str, conch: str) -> TritonOption:
    return TritonOption(name, group, REFUSED, conch)


_POOLS = (
    "the backends' frameworks (ONNX Runtime, PyTorch, TensorRT) allocate their own memory; "
    "Conch's workers keep no pool of their own to size"
)
_SAGEMAKER = "Conch serves KServe v2 (and an OpenAI-compatible API), not SageMaker's endpoints"
_VERTEX = "Conch serves KServe v2 (and an OpenAI-compatible API), not Vertex AI's endpoints"
_TRACE = (
    "set tracing at run time with Triton's trace extension (POST /v2/trace/setting: "
    "trace_level, trace_rate, trace_count); spans go where the OpenTelemetry environment "
    "sends them (OTEL_EXPORTER_OTLP_ENDPOINT), not to a file"
)

OPTIONS: tuple[TritonOption, ...] = (
    _i("help", "", "conch up --help", takes_value=False),
    # Server
    _i("id", "Server", "the server name that server metadata reports (same as --server-name)"),
    _i(
        "exit-timeout-secs",
        "Server",
        "bounds the drain of every gateway and worker on stop (default 30)",
    ),
    # Logging
    _i("log-verbose", "Logging", "any level above 0 sets every service's log level to DEBUG"),
    _i("log-info", "Logging", "false raises the services' log level to WARNING"),
    _i("log-warning", "Logging", "false (with --log-info=false) raises the level to ERROR"),
    _i("log-error", "Logging", "false (with the two above) silences the services' logs"),
    _i(
        "log-format",
        "Logging",
        "'default' and 'ISO8601' both give Conch's text lines (ISO 8601 time stamps); Conch "
        "also takes 'json' (its default: one JSON object per line) and 'text'",
    ),
    _no(
        "log-file",
        "Logging",
        "every service logs to conch up's standard output and error, for journald, a "
        "container runtime or a shell redirect (conch up ... >> FILE 2>&1) to keep",
    ),
    # Model repository
    _i("model-store", "Model Repository", "the same as --model-repository"),
    _i(
        "model-repository",
        "Model Repository",
        "repeatable; a local directory or s3://; a model name found in two repositories is "
        "served from neither (Triton's rule)",
    ),
    _i(
        "exit-on-error",
        "Model Repository",
        "true (default): a model that fails to load at start stops conch up; false: it serves "
        "the models that loaded",
    ),
    _i(
        "disable-auto-complete-config",
        "Model Repository",
        "every worker requires complete configurations",
        takes_value=False,
    ),
    _i(
        "strict-model-config",
        "DEPRECATED",
        "true is --disable-auto-complete-config (Triton's deprecated spelling)",
    ),
    _i(
        "strict-readiness",
        "Model Repository",
        "the gateways' /v2/health/ready: true waits for every model, false only for the mesh",
    ),
    _i(
        "model-control-mode",
        "Model Repository",
        "none, poll, explicit or on_demand, for the whole fleet: every service follows one mode",
    ),
    _i(
        "repository-poll-secs",
        "Model Repository",
        "poll mode's interval; every worker polls the repositories it reads",
    ),
    _i(
        "load-model",
        "Model Repository",
        "explicit mode's models at start (repeatable; '*' alone for all); conch up waits for them",
    ),
    _no(
        "model-load-thread-count",
        "Model Repository",
        "each worker loads the models of its backend; loads run in parallel across worker "
        "processes (--workers-per-backend), not across threads of one server",
    ),
    _only(
        "model-load-retry-count",
        "Model Repository",
        "0",
        "a failed load is not retried by itself; the repository API's load tries again",
    ),
    _only(
        "model-namespacing",
        "Model Repository",
        "false",
        "a model's name is its identity in the whole fleet (its Redis keys and streams)",
    ),
    # HTTP
    _only(
        "allow-http",
        "HTTP",
        "true",
        "the gateway always serves HTTP: it also carries the health probes, metrics and admin "
        "API that conch up and orchestrators use",
    ),
    _i(
        "http-address",
        "HTTP",
        "the gateway's bind address (--host); one gateway binds HTTP and gRPC, so a "
        "--grpc-address must be the same",
    ),
    _i("http-port", "HTTP", "the gateways' HTTP port (shared by their processes)"),
    _only(
        "reuse-http-port",
        "HTTP",
        "false",
        "a gateway binds its ports exclusively (a second mesh on a taken port fails at once); "
        "the gateway's own processes share the port (--gateways)",
    ),
    _i("http-header-forward-pattern", "HTTP", "headers matching it reach the model"),
    _no(
        "http-thread-count",
        "HTTP",
        "the gateway answers on event loops, not a thread pool; its parallelism is its process "
        "count (--gateways N)",
    ),
    _i(
        "http-restricted-api",
        "HTTP",
        "repeatable; API categories that require the header (Triton's refusal without it)",
    ),
    # GRPC
    _i("allow-grpc", "GRPC", "false: no gRPC port (--grpc-port 0)"),
    _i("grpc-address", "GRPC", "must equal --http-address: one gateway binds both"),
    _i("grpc-port", "GRPC", "the gateway's KServe v2 gRPC port"),
    _only(
        "reuse-grpc-port",
        "GRPC",
        "false",
        "a gateway binds its ports exclusively (a second mesh on a taken port fails at once)",
    ),
    _i("grpc-header-forward-pattern", "GRPC", "metadata matching it reaches the model"),
    _no(
        "grpc-infer-allocation-pool-size",
        "GRPC",
        "a pool of Triton's C++ gRPC server; Conch's gRPC service (grpcio, asyncio) keeps no "
        "such pool to size",
    ),
    _i("grpc-use-ssl", "GRPC", "gRPC over TLS on the gateway"),
    _i("grpc-use-ssl-mutual", "GRPC", "TLS with client certificates (implies --grpc-use-ssl)"),
    _i("grpc-server-cert", "GRPC", "PEM file of the gateway's gRPC certificate"),
    _i("grpc-server-key", "GRPC", "PEM file of its key"),
    _i("grpc-root-cert", "GRPC", "PEM file of the CA that signs client certificates"),
    _i(
        "grpc-infer-response-compression-level",
        "GRPC",
        "none, low, medium or high, for inference responses",
    ),
    _i("grpc-keepalive-time", "GRPC", "the gateway's gRPC keepalive (ms)"),
    _i("grpc-keepalive-timeout", "GRPC", "the gateway's gRPC keepalive (ms)"),
    _i("grpc-keepalive-permit-without-calls", "GRPC", "the gateway's gRPC keepalive"),
    _i("grpc-http2-max-pings-without-data", "GRPC", "the gateway's gRPC keepalive"),
    _i("grpc-http2-min-recv-ping-interval-without-data", "GRPC", "the gateway's gRPC keepalive"),
    _i("grpc-http2-max-ping-strikes", "GRPC", "the gateway's gRPC keepalive"),
    _no(
        "grpc-max-connection-age",
        "GRPC",
        "the gateway's gRPC server sets no connection age; put the Envoy edge (--with-envoy) "
        "in front to spread long-lived connections",
    ),
    _no(
        "grpc-max-connection-age-grace",
        "GRPC",
        "the gateway's gRPC server sets no connection age (see --grpc-max-connection-age)",
    ),
    _i(
        "grpc-restricted-protocol",
        "GRPC",
        "repeatable; protocol categories that require the metadata (Triton's refusal without it)",
    ),
    # Sagemaker and Vertex AI
    _only("allow-sagemaker", "Sagemaker", "false", _SAGEMAKER),
    _no("sagemaker-port", "Sagemaker", _SAGEMAKER),
    _no("sagemaker-safe-port-range", "Sagemaker", _SAGEMAKER),
    _no("sagemaker-thread-count", "Sagemaker", _SAGEMAKER),
    _only("allow-vertex-ai", "Vertex", "false", _VERTEX),
    _no("vertex-ai-port", "Vertex", _VERTEX),
    _no("vertex-ai-thread-count", "Vertex", _VERTEX),
    _no("vertex-ai-default-model", "Vertex", _VERTEX),
    # Metrics
    _only(
        "allow-metrics",
        "Metrics",
        "true",
        "every service serves /metrics (the gateway on its HTTP port); it cannot be turned off",
    ),
    _only(
        "allow-gpu-metrics",
        "Metrics",
        "true",
        "workers on GPUs report the nv_gpu_* families; they cannot be turned off",
    ),
    _only(
        "allow-cpu-metrics",
        "Metrics",
        "false",
        "Conch reports no nv_cpu_* families (Prometheus' node exporter covers the host)",
    ),
    _no(
        "metrics-address",
        "Metrics",
        "metrics have no server of their own: the gateway serves /metrics on --http-address",
    ),
    _no(
        "metrics-port",
        "Metrics",
        "metrics have no port of their own: scrape the gateway's /metrics on its HTTP port, "
        "and each worker and scheduler on its health port (conch up --with-prometheus does)",
    ),
    _no(
        "metrics-interval-ms",
        "Metrics",
        "request metrics are recorded as requests happen, and GPU gauges on the workers' "
        "own schedule; there is no interval to set",
    ),
    _no(
        "metrics-config",
        "Metrics",
        "Conch's latency families are fixed histograms (docs/observability.md); there are no "
        "summaries or counters to choose",
    ),
    # Tracing
    _no("trace-config", "Tracing", _TRACE),
    _no("trace-file", "DEPRECATED", _TRACE),
    _no("trace-level", "DEPRECATED", _TRACE),
    _no("trace-rate", "DEPRECATED", _TRACE),
    _no("trace-count", "DEPRECATED", _TRACE),
    _no("trace-log-frequency", "DEPRECATED", _TRACE),
    # Backend and repository agents
    _i(
        "backend-directory",
        "Backend",
        'where Python-based backends are (backend: "NAME" served by DIR/NAME/model.py, '
        "as Triton's vLLM backend is), for the python worker; several separated by ':' or ','; "
        "default /opt/tritonserver/backends, then Conch's examples/backends "
        "(docs/backends/python-based.md)",
    ),
    _no(
        "backend-config",
        "Backend",
        "backend settings are the workers' settings (CONCH_WORKER_*, docs/settings.md) and "
        "each model's parameters in its config.pbtxt",
    ),
    _no(
        "repoagent-directory",
        "Repository Agent",
        "Conch runs no repository agents (shared libraries that rewrite a model on load)",
    ),
    # Response cache
    _i(
        "cache-config",
        "Response Cache",
        "'local,size=N' starts a private cache Redis of that size, 'redis,host=H,port=P' uses "
        "one; shared by every gateway",
    ),
    _no(
        "cache-directory",
        "Response Cache",
        "the response cache is Redis (--cache-config), not a shared library to search for",
    ),
    _i(
        "response-cache-byte-size",
        "DEPRECATED",
        "the same as --cache-config local,size=N (Triton's deprecated spelling)",
    ),
    # Rate limiter
    _i(
        "rate-limit",
        "Rate Limiter",
        "off or execution_count: instances hold their rate_limiter resources while they "
        "execute, counted across the whole fleet in Redis (docs/rate-limiter.md)",
    ),
    _i(
        "rate-limit-resource",
        "Rate Limiter",
        "<name>:<count>[:<device>], repeatable: the copies of a resource per device (a GPU "
        "of each host) or, for a global resource, for the fleet",
    ),
    # Memory and devices
    _no("pinned-memory-pool-byte-size", "Memory/Device Management", _POOLS),
    _no("cuda-memory-pool-byte-size", "Memory/Device Management", _POOLS),
    _no("cuda-virtual-address-size", "Memory/Device Management", _POOLS),
    _no(
        "min-supported-compute-capability",
        "Memory/Device Management",
        "choose the GPUs conch up uses with CUDA_VISIBLE_DEVICES",
    ),
    _no(
        "buffer-manager-thread-count",
        "Memory/Device Management",
        "tensors travel between services as bytes in Redis; there are no copy threads to size",
    ),
    _no(
        "host-policy",
        "Memory/Device Management",
        "pin services to CPUs or NUMA nodes where they run (taskset, numactl, the container's "
        "cpuset); the workers size themselves to the CPUs they may use",
    ),
    _no(
        "model-load-gpu-limit",
        "Memory/Device Management",
        "a worker does not check GPU memory before a load; the framework's own load fails when "
        "memory runs out",
    ),
)

BY_NAME: dict[str, TritonOption] = {option.name: option for option in OPTIONS}


def refusal(name: str, value: str | None = None) -> str | None:
    """Why ``conch up`` refuses ``--name`` (with ``value`` in the table's spelling; None: none
    given, a bare boolean being "true"), or None when it accepts it. Names Triton does not have
    are not this table's to judge (None)."""
    option = BY_NAME.get(name)
    if option is None or option.status == IMPLEMENTED:
        return None
    if option.status == ONLY:
        if value is None:
            return f"--{name} needs a value; Conch takes only {option.only}: {option.conch}"
        if value.strip().lower() == option.only:
            return None
        return f"--{name}={value} is not supported: {option.conch} (only {option.only})"
    return f"--{name} is not supported: {option.conch}"


def markdown_table() -> str:
    """The table of docs/coming-from-triton.md: every option, what Conch does with it."""
    answer = {IMPLEMENTED: "yes", ONLY: "only `{}`", REFUSED: "refused"}
    lines = ["| Triton option | group | in Conch | Conch's equivalent, or why none |"]
    lines.append("|---|---|---|---|")
    for option in OPTIONS:
        said = answer[option.status].format(option.only)
        lines.append(f"| `--{option.name}` | {option.group or '-'} | {said} | {option.conch} |")
    return "\n".join(lines) + "\n"

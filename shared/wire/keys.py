"""Longer than 300 lines because every key name of the mesh lives here, in one place, so that
its hash tags can be read (and checked for Redis Cluster) together.

Every Redis key and stream name that crosses a service boundary.

Every key that one Lua script or MULTI touches shares one hash tag, so the same code runs on
Redis Cluster (``docs/scaling.md`` has the map; ``tests/integration/test_cluster_slots.py``
records a real run and fails when one call's keys hash apart):

- ``{<model>}``: a model's streams (requests, batches, dead letters), readiness and instance
  sets, statistics, admission dedupe keys and sequences: admission, dispatch, the fenced ack,
  dead-lettering and the sequence scripts each touch one model's slot.
- ``{fleet}``: the fleet-wide registry and control keys (models, repository index, control
  stream and state, load errors, labels, log and trace settings): small, rarely written.
- ``{policy}``: version weights, shadow traffic, draining versions and their revision.
- ``{tenants}``: tenants, API keys and their revision; ``{<tenant>}``: a tenant's rate buckets.
- ``{ratelimit}``: the rate limiter's resources (Triton's ``rate_limiter``), every scope.
- ``{gw:<id>}``: one gateway process's reply stream; ``{<host>}``: one host's shm regions.

The service registry keys carry no tag: each is written by single-key commands only.
"""

from __future__ import annotations

from collections.abc import Iterable

PREFIX = "conch"

# Consumer groups.
SCHEDULER_GROUP = "scheduler"
WORKER_GROUP = "workers"

# Stream entry fields.
FIELD_HEADER = b"h"
FIELD_DATA = b"d"
# A batch entry of the direct path: one request's payload, beside its header ``h``
# (``shared.wire.batch_entry``).
FIELD_DIRECT = b"r"


# Hash tags (see the module docstring).
FLEET = f"{PREFIX}:{{fleet}}"


def models() -> str:
    """HASH model name -> normalized config JSON, written by the workers that load the model."""
    return f"{FLEET}:models"


def models_rev() -> str:
    """Counter bumped whenever ``models()`` changes, so readers refresh only on change."""
    return f"{FLEET}:models:rev"


def _model(model: str) -> str:
    return f"{PREFIX}:m:{{{model}}}"


def model_versions(model: str) -> str:
    """SET of the versions that some worker has loaded (live or not)."""
    return f"{_model(model)}:versions"


def ready(model: str, version: int) -> str:
    """ZSET worker id -> heartbeat expiry (ms since epoch); live while the score is ahead."""
    return f"{_model(model)}:ready:{version}"


def instances(model: str, version: int) -> str:
    """HASH worker id -> number of execution instances of this version on that worker."""
    return f"{_model(model)}:instances:{version}"


def request_stream(model: str, version: int, priority: int) -> str:
    """STREAM of requests for one (model, version, priority level); read by the schedulers."""
    return f"{_model(model)}:req:{version}:p{priority}"


def parse_request_stream(name: str | bytes) -> tuple[str, int, int] | None:
    """(model, version, priority) of a request stream's name, None for any other name."""
    text = name.decode() if isinstance(name, bytes) else name
    head = f"{PREFIX}:m:{{"
    if not text.startswith(head) or "}:req:" not in text:
        return None
    model, _, rest = text[len(head) :].rpartition("}:req:")
    version, _, level = rest.partition(":p")
    if not (version.isdigit() and level.isdigit()):
        return None
    return model, int(version), int(level)


def batch_stream(model: str, version: int) -> str:
    """STREAM of formed batches for one (model, version); read by the workers."""
    return f"{_model(model)}:batch:{version}"


def admitted(model: str, request_id: str) -> str:
    """STRING set by the admission script while the request may still run: a retried admission
    of the same request id queues nothing (expires at the request's deadline)."""
    return f"{_model(model)}:admitted:{request_id}"


def cancel(model: str, request_id: str) -> str:
    """STRING "1" set by a gateway when the client of a request disconnects or cancels (expires
    60 s after the request's deadline): schedulers and workers never start it, a running
    decoupled model sees ``is_cancelled()``."""
    return f"{_model(model)}:cancel:{request_id}"


def cancel_children(model: str, request_id: str) -> str:
    """SET of ``"<model>\x00<request id>"`` sub-requests (ensemble steps, BLS) cancelled with
    the request."""
    return f"{_model(model)}:cancel:{request_id}:children"


def cancel_channel() -> str:
    """Pub/sub channel on which gateways announce each cancelled request
    (``<model>\x00<request id>``); workers drop such requests without asking Redis."""
    return f"{PREFIX}:cancelled"


def dead_letters(model: str) -> str:
    """STREAM of the model's entries that could not be decoded or executed within the delivery
    bound (request and batch entries alike), each with the reason; capped."""
    return f"{_model(model)}:dead"


def batch_done_channel(model: str, version: int) -> str:
    """Pub/sub channel on which workers announce each finished batch of a (model, version)."""
    return f"{_model(model)}:done:{version}"


BATCH_DONE_PATTERN = f"{PREFIX}:m:*:done:*"


def reply_stream(owner: str) -> str:
    """STREAM of replies for one gateway process (no consumer group; one reader)."""
    return f"{PREFIX}:reply:{{gw:{owner}}}"


def stats(model: str, version: int) -> str:
    """HASH of cumulative statistics counters for one (model, version)."""
    return f"{_model(model)}:stats:{version}"


def service_registry(kind: str) -> str:
    """ZSET service id -> heartbeat expiry (ms), per kind: gateway, scheduler, worker."""
    return f"{PREFIX}:services:{kind}"


def service_info(kind: str, service_id: str) -> str:
    """HASH of one service's details (host, port, pid, backend, models), expiring with it."""
    return f"{PREFIX}:service:{kind}:{service_id}"


# --- Traffic policy (tenants, API keys, rate limits, version weights, shadow traffic) ---------
# Global policy keys share a hash tag so that one Lua script may update a group of them.


def tenants() -> str:
    """HASH tenant name -> tenant record JSON (no raw keys: see ``api_keys``)."""
    return f"{PREFIX}:{{tenants}}"


def api_keys() -> str:
    """HASH sha256(api key) hex -> tenant name."""
    return f"{PREFIX}:{{tenants}}:apikeys"


def tenant_keys(tenant: str) -> str:
    """SET of the sha256 hex digests of one tenant's API keys."""
    return f"{PREFIX}:{{tenants}}:keys:{tenant}"


def tenants_rev() -> str:
    """Counter bumped on every tenant or key change, so gateways reload only on change."""
    return f"{PREFIX}:{{tenants}}:rev"


def rate_bucket(tenant: str, model: str | None = None) -> str:
    """HASH token bucket (tokens, ts) of a tenant, or of a tenant and one model."""
    base = f"{PREFIX}:rl:{{{tenant}}}"
    return base if model is None else f"{base}:m:{model}"


def rate_resource(name: str, scope: str) -> str:
    """HASH of one rate limiter resource (Triton's ``rate_limiter.resources``) in one scope:
    ``global``, or ``<host>/gpu<id>`` / ``<host>/cpu`` for a device's copies. Holders, waiters
    and their leases (``shared/lua/rate_resources.lua``); every scope shares ``{ratelimit}``,
    as one call takes all the resources an instance needs."""
    return f"{PREFIX}:{{ratelimit}}:res:{scope}:{name}"


def weights() -> str:
    """HASH model name -> version weights JSON ``{"1": 80, "3": 20}``."""
    return f"{PREFIX}:{{policy}}:weights"


def shadow() -> str:
    """HASH model name -> shadow traffic JSON ``{"version": 2, "percent": 10}``."""
    return f"{PREFIX}:{{policy}}:shadow"


def draining() -> str:
    """HASH "model:version" -> ms since epoch: versions being unloaded, routed around."""
    return f"{PREFIX}:{{policy}}:draining"


def policy_rev() -> str:
    """Counter bumped on every weights, shadow or draining change."""
    return f"{PREFIX}:{{policy}}:rev"


def shadow_stats(model: str, version: int) -> str:
    """HASH of shadow traffic counters (sent, succeeded, failed, latency_us) for a version."""
    return f"{_model(model)}:shadow:{version}"


# --- Fleet-wide model control (Triton's model repository extension) ----------------------------


def control_stream() -> str:
    """STREAM of model control messages; every worker reads all of it (no consumer group)."""
    return f"{FLEET}:control"


def control_state() -> str:
    """HASH model -> desired state JSON (config override, unloaded versions) for new workers."""
    return f"{FLEET}:control:models"


def control_acks(message_id: str) -> str:
    """LIST of the workers' answers to one control message."""
    return f"{FLEET}:control:ack:{message_id}"


def repository_index() -> str:
    """HASH model -> what workers found on disk ``{"versions": [...], "error": ...}``."""
    return f"{FLEET}:repository"


def repository_scanned() -> str:
    """STRING ms since epoch: a worker has written the whole repository index (the models the
    mesh is expected to serve are known; see ``shared.fleet.expected_models``)."""
    return f"{FLEET}:repository:scanned"


def load_errors() -> str:
    """HASH model -> why its last load failed ``{"worker": ..., "message": ..., "ms": ...}``."""
    return f"{FLEET}:load_errors"


# --- on_demand model control (shared.fleet.on_demand) ------------------------------------------


def demand() -> str:
    """HASH model -> ms of the first request that found it not loaded (the placer loads it)."""
    return f"{FLEET}:demand"


def placements() -> str:
    """HASH model -> the placer's load in progress ``{"worker": ..., "started_ms": ...}``."""
    return f"{FLEET}:placements"


def resident(worker: str) -> str:
    """HASH model -> what the worker holds of it ``{"bytes": ..., "last_used_ms": ...}``,
    refreshed with its heartbeat (expires with it)."""
    return f"{FLEET}:resident:{worker}"


def model_bytes() -> str:
    """HASH model -> bytes its last load was measured to take (the placer's size estimate)."""
    return f"{FLEET}:model_bytes"


def placer_lease() -> str:
    """STRING the id of the scheduler that places models (SET NX PX: one at a time)."""
    return f"{FLEET}:placer"


# --- Protocol extensions (shared memory, response cache, trace and log settings) --------------


def shm_regions(host: str) -> str:
    """HASH region name -> registration JSON: the shared memory regions clients registered with
    the gateways of one host (regions are host memory: only that host's gateways can map them)."""
    return f"{PREFIX}:shm:{{{host}}}"


def labels() -> str:
    """HASH model -> JSON {output: [label, ...]}: classification labels, published by workers."""
    return f"{FLEET}:labels"


def control_files(model: str) -> str:
    """HASH relative path -> bytes: the model files the last load of a model sent (Triton's
    ``file:<path>`` load parameters), written into every worker's model directory."""
    return f"{FLEET}:control:files:{model}"


def log_settings() -> str:
    """STRING: the fleet's log settings JSON (Triton's logging extension); every service follows
    it, told of changes on ``log_settings_channel``."""
    return f"{FLEET}:logging"


def log_settings_channel() -> str:
    return f"{FLEET}:logging:changed"


def changes_channel() -> str:
    """Pub/sub channel of the fleet's change feed (``shared/fleet/change_feed.py``): which cached
    state changed (models, policy, tenants, trace)."""
    return f"{FLEET}:changed"


def trace_settings() -> str:
    """HASH scope ("" for the fleet, else a model) -> trace settings JSON set through the trace
    extension."""
    return f"{FLEET}:trace"


def trace_remaining(scope: str) -> str:
    """STRING: traces left to sample for a scope whose trace_count is limited."""
    return f"{FLEET}:trace:remaining:{scope}"


# --- Sequences (stateful models): bindings, step queues, holders' slots ------------------------
# Every key of a (model, version)'s sequences shares the model's hash tag, so the admission,
# commit and adoption scripts each touch one Redis Cluster slot. The scripts build no key: the
# callers pass every one, per sequence and per instance too, named by the functions below.


def _sequence_prefix(model: str, version: int) -> str:
    return f"{_model(model)}:seq:{version}:"


def sequence_binding(model: str, version: int, sequence: str) -> str:
    """HASH of one sequence: holder instance, step counters, last activity, committed state."""
    return f"{_sequence_prefix(model, version)}s:{sequence}"


def sequence_queue(model: str, version: int, sequence: str) -> str:
    """LIST of one sequence's admitted steps not yet committed, in arrival order."""
    return f"{_sequence_prefix(model, version)}q:{sequence}"


def sequence_slots(model: str, version: int) -> str:
    """HASH instance id -> sequence slots it offers (registered by the holding worker)."""
    return f"{_sequence_prefix(model, version)}slots"


def sequence_held(model: str, version: int, instance: str) -> str:
    """ZSET sequence -> idle deadline (ms): the sequences one instance holds."""
    return f"{_sequence_prefix(model, version)}held:{instance}"


def sequence_bell(model: str, version: int, instance: str) -> str:
    """STREAM of doorbells (sequence names) telling an instance a step is queued for it."""
    return f"{_sequence_prefix(model, version)}bell:{instance}"


def sequence_backlog(model: str, version: int) -> str:
    """ZSET sequence -> arrival (ms): sequences waiting for a free slot, oldest first."""
    return f"{_sequence_prefix(model, version)}backlog"


def sequence_instance_keys(model: str, version: int, instances: Iterable[str]) -> list[str]:
    """Per instance, its held set then its doorbells: the KEYS pairs of the sequence scripts
    that may place a sequence on any of ``instances``."""
    out: list[str] = []
    for instance in instances:
        out += [sequence_held(model, version, instance), sequence_bell(model, version, instance)]
    return out


def sequence_keys(model: str, version: int, sequences: Iterable[str]) -> list[str]:
    """Per sequence, its binding then its queue: the KEYS pairs of the sequence scripts."""
    out: list[str] = []
    for sequence in sequences:
        out += [
            sequence_binding(model, version, sequence),
            sequence_queue(model, version, sequence),
        ]
    return out


# --- Ensembles (every key under the ensemble's hash tag: its scripts touch one slot) ------------


def ensemble_state(model: str, version: int, request_id: str) -> str:
    """HASH of one ensemble request in flight: ``req``, ``entry``, produced tensors ``t:<name>``,
    answered steps ``d:<step>``, launched steps' child request ids ``c:<step>`` (cancel hook)."""
    return f"{_model(model)}:ens:{version}:r:{request_id}"


def ensemble_steps(model: str, version: int) -> str:
    """STREAM of the replies to an ensemble's steps, consumed by the schedulers' group."""
    return f"{_model(model)}:ens:{version}:steps"


def is_gateway_reply_stream(name: str) -> bool:
    """Reply streams with one reader expire when it is gone; an ensemble's step stream does not."""
    return name.startswith(f"{PREFIX}:reply:")

"""Write concern for admission and dispatch: ``CONCH_REDIS_WAIT_REPLICAS`` (0: off).

Redis replicates asynchronously: a master that dies right after acknowledging a write may take
it along, and the replica promoted in its place never saw it (a request admitted but gone, a
batch dispatched but gone: such requests are answered by their deadline, not lost silently, but
late). With N > 0, the admission pipeline and the dispatch script are each followed by
``WAIT N <timeout>`` on the same connection, so the gateway waits for N replicas to hold the
request before it awaits the answer, and the scheduler before it moves on. WAIT does not make
Redis strongly consistent (a replica that acked may still lose the election); it narrows the
window to almost nothing, for one more round trip to the replica on every admission and batch
(docs/scaling.md has both figures).

The setting belongs to the client (a write concern, as database drivers have): the services
configure it once where they create their pool (``configure``), and the write paths queue the
WAIT wherever they pipeline a write (``queue_wait``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio.cluster import ClusterPipeline

log = logging.getLogger(__name__)

_ATTR = "_conch_wait"


def configure(client: Any, replicas: int, timeout_ms: int) -> None:
    if replicas > 0:
        setattr(client, _ATTR, (replicas, max(1, timeout_ms)))


def of(client: Any) -> tuple[int, int] | None:
    return getattr(client, _ATTR, None)


def queue_wait(pipe: Any, wait: tuple[int, int], keys: list[Any]) -> int:
    """Queue WAITs after the writes already in ``pipe`` to these keys: one per node that holds
    them (on a cluster the WAIT must follow the write on that node's connection). Returns how
    many replies the WAITs add at the end of the pipeline's results."""
    replicas, timeout_ms = wait
    if not isinstance(pipe, ClusterPipeline):
        pipe.execute_command("WAIT", replicas, timeout_ms)
        return 1
    nodes = {}
    for key in keys:
        node = pipe.cluster_client.get_node_from_key(key)
        assert node is not None  # every slot has a primary once the cluster client is up
        nodes[node.name] = node
    for node in nodes.values():
        pipe.execute_command("WAIT", replicas, timeout_ms, target_nodes=node)
    return len(nodes)


_LOG_EVERY_S = 10.0
_last_logged: dict[str, float] = {}


def check(replies: list[Any], wait: tuple[int, int], what: str) -> None:
    """Log when fewer replicas than asked acknowledged within the timeout: the write stands
    (it is on the master), only its durability across a failover is not assured. At most one
    line per 10 s and kind of write: a shard without a replica would otherwise log each one."""
    replicas, timeout_ms = wait
    short = [r for r in replies if isinstance(r, int) and r < replicas]
    errors = [r for r in replies if isinstance(r, Exception)]
    now = time.monotonic()
    if (short or errors) and now - _last_logged.get(what, -_LOG_EVERY_S) >= _LOG_EVERY_S:
        _last_logged[what] = now
        log.warning(
            "write not acknowledged by enough replicas",
            extra={
                "what": what,
                "replicas": replicas,
                "timeout_ms": timeout_ms,
                "acked": short,
                "errors": [str(e) for e in errors],
            },
        )

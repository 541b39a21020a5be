"""The direct path: when a model's queue is empty and its instances idle, a request with no
queue delay goes straight to the batch stream as a batch of one, skipping the scheduler's hop.

This is Triton's rule for a dynamic batcher with ``max_queue_delay_microseconds: 0`` (and its
default scheduler, no ``dynamic_batching`` at all): a request that finds nothing queued and an
idle instance runs at once. Whether a model *may* take the path is decided here, from its
configuration alone (pure); whether a request *does* is decided atomically by the admission
script (``shared.fleet.admission_script``): only when every request stream of the version (all
priority levels) and the version's batch stream are empty, i.e. nothing is queued, held by a
scheduler, or in flight. Otherwise the request is queued and batched as always.

Never direct: sequence models (their own admission, ``gateway.core.sequence_admission``), ensembles
(run by the schedulers), decoupled models (their batches stay on the batch stream until the last
response; kept on the scheduler's path), and any model whose batcher may wait for more requests
(a queue delay above 0).
"""

from __future__ import annotations

from shared.model_config import ModelConfig


def direct_levels(config: ModelConfig, enabled: bool = True) -> list[int]:
    """The priority levels whose request streams must all be empty for a request of this
    model to go direct; empty when the model never goes direct (or the path is turned off)."""
    if not enabled or config.backend == "ensemble" or config.platform == "ensemble":
        return []
    if config.sequence_batching is not None or config.decoupled:
        return []
    batching = config.dynamic_batching
    if batching is not None and batching.max_queue_delay_microseconds > 0:
        return []
    return config.priority_levels()

"""What of ``sequence_batching`` this worker cannot serve yet: refused at load, in one line.

A model that needs a missing piece must never be served as if it did not (its answers would be
silently wrong), so the load fails and the repository index shows why.
"""

from __future__ import annotations

from pathlib import Path

from shared.model_config import ModelConfig
from shared.model_config.sequences import sequence_spec
from shared.wire.errors import ConchError, ErrorCode
from workers.sequence.state import initial_state


def check_sequence_support(config: ModelConfig, model_dir: Path) -> None:
    spec = sequence_spec(config)
    if spec is None:
        return

    def refuse(missing: str) -> None:
        raise ConchError(
            ErrorCode.UNSUPPORTED,
            f"model '{config.name}' needs {missing}, which Conch does not support yet",
        )

    if spec.iterative:
        refuse("sequence_batching.iterative_sequence (iterative scheduling of decoupled models)")
    if (config.json.get("model_transaction_policy") or {}).get("decoupled"):
        refuse("a decoupled sequence model (model_transaction_policy.decoupled)")
    for state in spec.states:  # Triton reads the initial states at load: so do we
        initial_state(state, spec.batched, model_dir)

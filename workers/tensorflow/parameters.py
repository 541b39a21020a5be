"""The model's ``parameters`` as Triton's tensorflow backend reads them (its keys, its checks
and error texts), turned into the settings of the instance's TensorFlow session."""

from __future__ import annotations

from dataclasses import dataclass

from shared.wire.errors import ConchError, ErrorCode

DEFAULT_TAG = "serve"
# Triton's ParseBoolValue spellings of true.
_TRUE = {"true", "on", "1", "yes"}


@dataclass(frozen=True)
class SessionSettings:
    """The model's ``parameters`` as Triton's tensorflow backend reads them.

    Threads default to one intra-op and one inter-op thread per session, and sessions to their
    own thread pools: a mesh node shares its cores between gateways, the scheduler and workers,
    and parallelism comes from ``instance_group { count }``, each instance a session of its own
    (TensorFlow's defaults, a thread per core in one pool shared by every session, would take
    every core and serialise two instances on one pool)."""

    intra_op_threads: int = 1
    inter_op_threads: int = 1
    per_session_threads: bool = True
    graph_tag: str = DEFAULT_TAG
    signature_def: str = ""  # "": serving_default, else any serving signature

    @classmethod
    def from_parameters(cls, model: str, parameters: dict[str, str]) -> SessionSettings:
        def count(key: str, default: int) -> int:
            raw = parameters.get(key, "")
            if raw == "":
                return default
            try:
                value = int(raw)
            except ValueError:
                value = -1
            if value < 0:
                raise ConchError(
                    ErrorCode.INVALID_ARG,
                    f"parameter '{key}' must be non-negative number for TensorFlow model "
                    f"'{model}' (got '{raw}')",
                )
            return value

        share = parameters.get("MAX_SESSION_SHARE_COUNT", "")
        if share and (not share.isdigit() or int(share) <= 0):
            raise ConchError(
                ErrorCode.INVALID_ARG,
                f"parameter 'MAX_SESSION_SHARE_COUNT' must be positive number for TensorFlow "
                f"model '{model}' (got '{share}')",
            )
        per_session = parameters.get("TF_USE_PER_SESSION_THREADS", "")
        return cls(
            intra_op_threads=count("TF_NUM_INTRA_THREADS", 1),
            inter_op_threads=count("TF_NUM_INTER_THREADS", 1),
            per_session_threads=per_session.lower() in _TRUE if per_session else True,
            graph_tag=parameters.get("TF_GRAPH_TAG") or DEFAULT_TAG,
            signature_def=parameters.get("TF_SIGNATURE_DEF", ""),
        )

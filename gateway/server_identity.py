"""What this server says it is: the name, version and KServe v2 extensions that REST ``GET /v2``,
gRPC ``ServerMetadata`` and the OpenAPI schema all report, so the three cannot disagree.

The name is Conch's unless the operator sets another (``conch up --server-name triton``,
``CONCH_GATEWAY_SERVER_NAME``): client code written for Triton sometimes checks it.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SERVER_NAME = "conch"
SERVER_VERSION = "0.1.0"
EXTENSIONS = [
    "classification",
    "binary_tensor_data",
    "model_configuration",
    "schedule_policy",
    "parameters",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "system_shared_memory",
    "cuda_shared_memory",
    "trace",
    "logging",
    "sequence",
    "sequence(string_id)",
]


def server_metadata(name: str) -> dict[str, Any]:
    """The server metadata object (``GET /v2``), under the configured name."""
    return {
        "name": name or DEFAULT_SERVER_NAME,
        "version": SERVER_VERSION,
        "extensions": EXTENSIONS,
    }

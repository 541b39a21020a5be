"""What this server says it is: the name, version and KServe v2 extensions that REST ``GET /v2``,
gRPC ``ServerMetadata`` and the OpenAPI schema all report, so the three cannot disagree."""

from __future__ import annotations

SERVER_NAME = "conch"
SERVER_VERSION = "0.1.0"
EXTENSIONS = [
    "binary_tensor_data",
    "model_configuration",
    "schedule_policy",
    "parameters",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "sequence",
    "sequence(string_id)",
]

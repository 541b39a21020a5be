"""Triton's ``config.pbtxt`` read into a typed configuration, with Triton's names and defaults.

Parsing uses Triton's own schema (``model_config.proto`` as shipped in tritonclient), so a real
Triton repository loads unchanged and an unknown field is an error naming the file, line and
field. The typed :class:`ModelConfig` holds what Conch's services act on; ``to_json`` gives the
JSON form that Triton's ``/v2/models/{m}/config`` returns.

The package: :mod:`~shared.model_config.structs` (the typed configuration),
:mod:`~shared.model_config.parsing` (pbtxt, JSON or a model directory → typed),
:mod:`~shared.model_config.defaults` (Triton's defaults for what a file leaves out),
:mod:`~shared.model_config.validation` (Triton's load-time checks) and
:mod:`~shared.model_config.json_form` (Triton's JSON form). Services use this module's names.
"""

from shared.model_config.defaults import (
    BACKEND_PLATFORMS,
    DEFAULT_MODEL_FILENAMES,
    PLATFORM_BACKENDS,
)
from shared.model_config.parsing import CONFIG_FILENAME, from_json, load, parse_pbtxt
from shared.model_config.structs import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    QueuePolicy,
    TensorSpec,
    VersionPolicy,
)

__all__ = [
    "BACKEND_PLATFORMS",
    "CONFIG_FILENAME",
    "DEFAULT_MODEL_FILENAMES",
    "PLATFORM_BACKENDS",
    "DynamicBatching",
    "InstanceGroup",
    "ModelConfig",
    "QueuePolicy",
    "TensorSpec",
    "VersionPolicy",
    "from_json",
    "load",
    "parse_pbtxt",
]

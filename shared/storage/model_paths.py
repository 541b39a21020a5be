"""Names and file references that become paths on disk: validated before anything is joined.

A model name from a URL (``/v2/repository/models/{name}/load``) is joined to the repository
path, and a configuration (on disk, or sent with a load request) names files inside the model's
directory: ``default_model_filename`` and warmup ``input_data_file``. None of them may leave
that directory: a name is one path segment of letters, digits, ``_``, ``-`` and ``.`` (not
starting with a dot, so never ``.`` or ``..``), and a file reference is a relative path without
``..`` segments. Refusals are 400s naming the field.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from shared.model_config import ModelConfig
from shared.wire.errors import invalid

MODEL_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}$")


def check_model_name(name: str, field: str = "model name") -> None:
    if not MODEL_NAME.match(name):
        raise invalid(
            f"{field} {name!r} is not a valid model name: expected 1 to 255 letters, digits, "
            "'_', '-' or '.', not starting with '.' (a model is one directory of the repository)"
        )


def confined(reference: str) -> bool:
    """Whether a file reference stays inside the directory it is relative to."""
    if not reference or "\\" in reference or "\x00" in reference:
        return False
    path = PurePosixPath(reference)
    return not path.is_absolute() and ".." not in path.parts


def check_model_files(config: ModelConfig, field: str = "config") -> None:
    """Every file the configuration names stays inside the model's directory."""
    if config.default_model_filename and not confined(config.default_model_filename):
        raise invalid(
            f"field '{field}.default_model_filename' is {config.default_model_filename!r}: "
            "expected a file name inside the model's version directory (no '..', not absolute)"
        )
    for index, setting in enumerate(config.model_warmup):
        inputs = setting.get("inputs", {}) if isinstance(setting, dict) else {}
        for name, spec in inputs.items() if isinstance(inputs, dict) else ():
            reference = spec.get("input_data_file") if isinstance(spec, dict) else None
            if reference is not None and not confined(str(reference)):
                raise invalid(
                    f"field '{field}.model_warmup[{index}].inputs.{name}.input_data_file' is "
                    f"{reference!r}: expected a file name inside the model's warmup directory"
                )

"""``pb_utils.ModelConfig``: what a Python model's ``auto_complete_config`` receives and returns.

Triton calls the model class's static ``auto_complete_config(config)`` once at load (unless
auto-complete is off); the model adds inputs, outputs, a max batch size, dynamic batching or a
transaction policy, and Triton loads the configuration it returns. Conch runs it in a short-lived
model process (``workers.python.backend``); the rules below follow Triton's: a field the
configuration already sets may only be set again to the same value.
"""

from __future__ import annotations

import copy
import json
from typing import Any

_REQUIRED = ("name", "data_type", "dims")
_TENSOR_FIELDS = {
    "name",
    "data_type",
    "dims",
    "format",
    "reshape",
    "is_shape_tensor",
    "allow_ragged_batch",
    "optional",
    "label_filename",
    "is_non_linear_format_io",
}


class ModelConfig:
    def __init__(self, model_config: dict[str, Any] | str):
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        self._config: dict[str, Any] = copy.deepcopy(config)
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])
        self._config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._config)

    def set_max_batch_size(self, max_batch_size: int) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 0:
            raise ValueError(f"max_batch_size must be an integer >= 0, got {max_batch_size!r}")
        current = int(self._config.get("max_batch_size", 0))
        if current not in (0, max_batch_size):
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._config.get('name', '')}' specified max_batch_size "
                f"{max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if self._config.get("sequence_batching"):
            raise ValueError(
                f"configuration of model '{self._config.get('name', '')}' specified "
                "sequence_batching; dynamic batching cannot be set with it"
            )
        self._config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        unknown = set(transaction_policy_dict) - {"decoupled"}
        if unknown:
            raise ValueError(
                f"model_transaction_policy has unknown field(s) {sorted(unknown)}; "
                "expected 'decoupled'"
            )
        current = self._config.get("model_transaction_policy", {})
        wanted = bool(transaction_policy_dict.get("decoupled", False))
        if "decoupled" in current and bool(current["decoupled"]) != wanted:
            raise ValueError(
                f"configuration of model '{self._config.get('name', '')}' specified decoupled "
                f"{current['decoupled']}, but auto_complete_config set {wanted}"
            )
        self._config["model_transaction_policy"] = {"decoupled": wanted}

    def _add(self, kind: str, tensor: dict[str, Any]) -> None:
        if not isinstance(tensor, dict):
            raise ValueError(f"{kind} must be a dict, got {type(tensor).__name__}")
        missing = [key for key in _REQUIRED if key not in tensor]
        if missing:
            raise ValueError(f"{kind} {tensor!r} is missing {', '.join(repr(m) for m in missing)}")
        unknown = set(tensor) - _TENSOR_FIELDS
        if unknown:
            raise ValueError(f"{kind} '{tensor['name']}' has unknown field(s) {sorted(unknown)}")
        entry = copy.deepcopy(tensor)
        entry["dims"] = [int(d) for d in entry["dims"]]
        for existing in self._config[kind]:
            if existing.get("name") != entry["name"]:
                continue
            for key in ("data_type", "dims"):
                if key in existing and [existing[key]] != [entry[key]]:
                    raise ValueError(
                        f"unable to add {kind} '{entry['name']}': the configuration already has "
                        f"it with {key} {existing[key]!r}, auto_complete_config gave "
                        f"{entry[key]!r}"
                    )
            existing.update(entry)
            return
        self._config[kind].append(entry)

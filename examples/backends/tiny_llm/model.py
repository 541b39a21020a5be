"""tiny_llm: Conch's generative engine packaged as a Python-based backend, the way Triton's vLLM
backend packages vLLM.

Installed as ``<backend directory>/tiny_llm/model.py`` (Conch's ``examples/backends`` is searched
by default). A model that uses it is what a vLLM model is: a ``config.pbtxt`` naming the backend
(inputs, outputs, ``decoupled: true`` and ``max_batch_size: 0`` come from
``auto_complete_config``, with vLLM's tensor names) and a version directory with ``model.json``,
the engine's arguments::

    {"model": ".", "max_sequences": 32, "token_budget": 512, "batching": "continuous"}

``model``: the directory of the weights (``weights.pt`` and ``architecture.json`` of
``workers.generative.checkpoint``), relative to the version directory; ``"."`` (the default)
is the version directory itself. The other keys are the engine's settings; any may be left out.
Requests stream as the ``tiny_gpt`` example's do (``workers.generative.decoupled``): one response
per token with ``stream``, else one with the whole text.
"""

import json
import os
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from workers.generative.decoupled import ENGINE_DEFAULTS, GenerativeModel

ENGINE_ARGS_FILE = "model.json"  # vLLM's name for it
KEYS = {"model", "batching", *ENGINE_DEFAULTS}

INPUTS = [
    ("text_input", "TYPE_STRING", [1], False),
    ("stream", "TYPE_BOOL", [1], True),
    ("sampling_parameters", "TYPE_STRING", [1], True),
    ("exclude_input_in_output", "TYPE_BOOL", [1], True),
    ("max_tokens", "TYPE_INT32", [1], True),
    ("temperature", "TYPE_FP32", [1], True),
    ("top_p", "TYPE_FP32", [1], True),
    ("seed", "TYPE_INT64", [1], True),
    ("stop", "TYPE_STRING", [-1], True),
    ("return_finish_reason", "TYPE_BOOL", [1], True),
    ("return_num_input_tokens", "TYPE_BOOL", [1], True),
    ("return_num_output_tokens", "TYPE_BOOL", [1], True),
]
OUTPUTS = [
    ("text_output", "TYPE_STRING"),
    ("finish_reason", "TYPE_STRING"),
    ("num_input_tokens", "TYPE_UINT32"),
    ("num_output_tokens", "TYPE_UINT32"),
]


def engine_args(model_dir: str) -> dict[str, Any]:
    """``model.json`` of the version directory; unknown keys are refused, naming the file."""
    path = os.path.join(model_dir, ENGINE_ARGS_FILE)
    if not os.path.isfile(path):
        raise pb_utils.TritonModelException(
            f"'{ENGINE_ARGS_FILE}' containing the engine's arguments must be provided in "
            f"'{model_dir}'"
        )
    with open(path, encoding="utf-8") as file:
        args = json.load(file)
    if not isinstance(args, dict) or set(args) - KEYS:
        got = sorted(args) if isinstance(args, dict) else type(args).__name__
        raise pb_utils.TritonModelException(
            f"{path}: expected a JSON object with keys among {sorted(KEYS)}, got {got}"
        )
    return dict(args)


class TritonPythonModel(GenerativeModel):
    pb_utils = pb_utils

    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        """vLLM's tensors, decoupled responses and no batch dimension (its backend's choices)."""
        config = auto_complete_model_config.as_dict()
        have = {t["name"] for t in config.get("input", []) + config.get("output", [])}
        for name, data_type, dims, optional in INPUTS:
            if name not in have:
                tensor = {"name": name, "data_type": data_type, "dims": dims}
                auto_complete_model_config.add_input({**tensor, "optional": optional})
        for name, data_type in OUTPUTS:
            if name not in have:
                auto_complete_model_config.add_output(
                    {"name": name, "data_type": data_type, "dims": [-1]}
                )
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    def initialize(self, args: dict[str, Any]) -> None:
        self._engine_args = engine_args(pb_utils.get_model_dir())
        super().initialize(args)

    def checkpoint_dir(self, args: dict[str, Any]) -> Path:
        return Path(pb_utils.get_model_dir()) / str(self._engine_args.get("model", "."))

    def engine_settings(self, config: dict[str, Any]) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "batching": str(self._engine_args.get("batching", "continuous"))
        }
        for key, default in ENGINE_DEFAULTS.items():
            value = self._engine_args.get(key, default)
            if not isinstance(value, int):
                raise pb_utils.TritonModelException(
                    f"{ENGINE_ARGS_FILE}: '{key}' must be an integer, got {value!r}"
                )
            settings[key] = value
        return settings

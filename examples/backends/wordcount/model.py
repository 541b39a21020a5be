"""wordcount: a Python-based backend of Conch's own, the smallest one that is still a backend.

Installed as ``<backend directory>/wordcount/model.py`` (Triton's layout; Conch's
``examples/backends`` is searched by default). Any number of models use it with
``backend: "wordcount"``; the configuration needs no inputs or outputs (``auto_complete_config``
adds them) and each model's version directory holds only its data, ``<version>/model.json``, the
way Triton's vLLM backend reads its engine arguments::

    {"separator": null, "lowercase": true, "min_length": 1}

``separator``: null splits on whitespace, a string splits on it; ``lowercase``: whether "The" and
"the" are one word for ``UNIQUE``; ``min_length``: shorter words are not counted. Every key is
optional. Each request carries ``TEXT`` (BYTES, one string a row); the answer is ``COUNT`` (the
words of each row) and ``UNIQUE`` (the distinct ones). Batched: the dynamic batcher hands
``execute`` several requests, answered in one pass.
"""

import json
import os
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

SETTINGS_FILE = "model.json"
DEFAULTS = {"separator": None, "lowercase": True, "min_length": 1}


def read_settings(model_dir: str) -> dict[str, Any]:
    """The model's ``model.json`` over the defaults; unknown keys and wrong types are refused."""
    settings = dict(DEFAULTS)
    path = os.path.join(model_dir, SETTINGS_FILE)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as file:
            given = json.load(file)
        if not isinstance(given, dict):
            raise pb_utils.TritonModelException(f"{path}: expected a JSON object")
        unknown = sorted(set(given) - set(DEFAULTS))
        if unknown:
            raise pb_utils.TritonModelException(
                f"{path}: unknown key(s) {unknown}; expected {sorted(DEFAULTS)}"
            )
        settings.update(given)
    if settings["separator"] is not None and not isinstance(settings["separator"], str):
        raise pb_utils.TritonModelException(f"{path}: 'separator' must be a string or null")
    if not isinstance(settings["min_length"], int) or settings["min_length"] < 1:
        raise pb_utils.TritonModelException(f"{path}: 'min_length' must be an integer >= 1")
    return settings


def count_words(
    texts: list[Any], separator: str | None = None, lowercase: bool = True, min_length: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(COUNT, UNIQUE) for each text: the function the backend serves, callable in-process."""
    counts = np.zeros(len(texts), dtype=np.int64)
    unique = np.zeros(len(texts), dtype=np.int64)
    for index, raw in enumerate(texts):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        words = [w for w in text.split(separator) if len(w.strip()) >= min_length]
        counts[index] = len(words)
        unique[index] = len({w.strip().lower() if lowercase else w.strip() for w in words})
    return counts, unique


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        """The backend's tensors, so a model's config.pbtxt may name only the backend."""
        config = auto_complete_model_config.as_dict()
        have = {t["name"] for t in config.get("input", []) + config.get("output", [])}
        if "TEXT" not in have:
            auto_complete_model_config.add_input(
                {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}
            )
        for name in ("COUNT", "UNIQUE"):
            if name not in have:
                auto_complete_model_config.add_output(
                    {"name": name, "data_type": "TYPE_INT64", "dims": [1]}
                )
        return auto_complete_model_config

    def initialize(self, args: dict[str, str]) -> None:
        self.settings = read_settings(pb_utils.get_model_dir())
        self.batched = json.loads(args["model_config"]).get("max_batch_size", 0) > 0

    def execute(self, requests: list[Any]) -> list[Any]:
        texts: list[Any] = []
        sizes: list[int] = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts.extend(rows.tolist())
            sizes.append(len(rows))
        counts, unique = count_words(texts, **self.settings)
        responses: list[Any] = []
        start = 0
        for size in sizes:
            shape = (size, 1) if self.batched else (size,)
            outputs = [
                pb_utils.Tensor("COUNT", counts[start : start + size].reshape(shape)),
                pb_utils.Tensor("UNIQUE", unique[start : start + size].reshape(shape)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
            start += size
        return responses

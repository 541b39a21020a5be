"""Triton FIL's ``parameters``, read as pure functions so every rule is testable without a model.

Triton's FIL backend takes its options as strings in ``config.pbtxt``. Its 25.09 release renamed
some of them (``output_class`` -> ``is_classifier``, ``algo`` -> ``layout``,
``threads_per_tree`` -> ``chunk_size``) and dropped others (``storage_type``,
``blocks_per_sm``) while still accepting the old names with a warning; repositories written for
either generation load here. Options that only steer the GPU kernels change no answer, so on CPU
they are checked for a sane value, noted in the log, and otherwise ignored.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from shared.wire.errors import ConchError, ErrorCode

# model_type -> the file Triton's FIL looks for when default_model_filename is unset.
MODEL_FILENAMES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}

# GPU-only or layout options: accepted values (None: a non-negative integer) and why ignored.
_IGNORED_CHOICES: dict[str, tuple[frozenset[str] | None, str]] = {
    "storage_type": (
        frozenset({"AUTO", "DENSE", "SPARSE", "SPARSE8"}),
        "how trees sit in GPU memory",
    ),
    "algo": (
        frozenset({"ALGO_AUTO", "NAIVE", "TREE_REORG", "BATCH_TREE_REORG"}),
        "a GPU kernel layout",
    ),
    "layout": (
        frozenset({"DEPTH_FIRST", "BREADTH_FIRST", "LAYERED"}),
        "FIL's in-memory node order",
    ),
    "threads_per_tree": (None, "CUDA threads per tree"),
    "chunk_size": (None, "CUDA threads per tree"),
    "blocks_per_sm": (None, "CUDA blocks per multiprocessor"),
    "transfer_threshold": (None, "when rows move to the GPU"),
}
_IGNORED_FLAGS = {
    "use_experimental_optimizations": "FIL's own CPU kernels; the libraries' predict runs here",
    "xgboost_allow_unknown_field": "XGBoost's own loader reads the file and skips unknown fields",
}
_POSITIVE_IGNORED = frozenset({"threads_per_tree", "chunk_size"})


@dataclass(frozen=True)
class FilParameters:
    """What the backend does with a model: how to load it and how to shape its output."""

    model_type: str = "xgboost"
    is_classifier: bool = False
    predict_proba: bool = False
    threshold: float = 0.5
    # Threads for one predict call (Triton's cpu_nthread; 0: every core).
    cpu_nthread: int = 1
    # One line per accepted-but-ignored option, for the load log.
    notes: list[str] = field(default_factory=list)


def _bad(model: str, key: str, value: str, expected: str) -> ConchError:
    return ConchError(
        ErrorCode.INVALID_ARG,
        f"model '{model}': FIL parameter '{key}' is '{value}'; expected {expected}",
    )


def _flag(model: str, key: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise _bad(model, key, value, '"true" or "false"')


def _integer(model: str, key: str, value: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise _bad(model, key, value, f"an integer >= {minimum}")
    return number


def parse(model: str, parameters: dict[str, str]) -> FilParameters:
    """The config's ``parameters`` as FIL reads them; ConchError naming a bad key and value."""
    model_type = parameters.get("model_type", "xgboost").strip()
    if model_type not in MODEL_FILENAMES:
        hint = (
            " (save a scikit-learn forest as a Treelite checkpoint)" if "sk" in model_type else ""
        )
        raise ConchError(
            ErrorCode.UNSUPPORTED,
            f"model '{model}': {model_type} not recognized as a valid serialization format; "
            f"model_type must be one of {', '.join(MODEL_FILENAMES)}{hint}",
        )
    notes: list[str] = []
    classifier = False
    if "is_classifier" in parameters:
        classifier = _flag(model, "is_classifier", parameters["is_classifier"])
    if "output_class" in parameters:  # the pre-25.09 name wins, as in Triton's FIL
        classifier = _flag(model, "output_class", parameters["output_class"])
    proba = _flag(model, "predict_proba", parameters.get("predict_proba", "false"))
    threshold = 0.5
    if "threshold" in parameters:
        raw = parameters["threshold"]
        try:
            threshold = float(raw)
        except ValueError:
            threshold = math.nan
        if not math.isfinite(threshold):
            raise _bad(model, "threshold", raw, "a finite number, e.g. 0.5")
    nthread = 1
    if "cpu_nthread" in parameters:
        nthread = _integer(model, "cpu_nthread", parameters["cpu_nthread"], -1)
        nthread = max(nthread, 0)  # -1 (Triton's default) and 0: every core
    for key, (choices, what) in _IGNORED_CHOICES.items():
        if key not in parameters:
            continue
        value = parameters[key]
        if choices is None:
            _integer(model, key, value, 1 if key in _POSITIVE_IGNORED else 0)
        elif value.strip().upper() not in choices:
            raise _bad(model, key, value, "one of " + ", ".join(sorted(choices)))
        notes.append(f"parameter {key}={value} ignored on CPU: it sets {what}")
    for key, why in _IGNORED_FLAGS.items():
        if key in parameters:
            _flag(model, key, parameters[key])
            notes.append(f"parameter {key}={parameters[key]} ignored: {why}")
    return FilParameters(model_type, classifier, proba, threshold, nthread, notes)


def threads(parameters: FilParameters) -> int:
    """Threads for the libraries: cpu_nthread, every core for 0."""
    return parameters.cpu_nthread or (os.cpu_count() or 1)


def model_filename(default_model_filename: str, parameters: FilParameters) -> str:
    """default_model_filename, or the name Triton's FIL expects for the model_type."""
    return default_model_filename or MODEL_FILENAMES[parameters.model_type]


def output_width(parameters: FilParameters, num_classes: int) -> int:
    """Columns of ``output__0`` per row: class scores with predict_proba (a binary model's
    two, as scikit-learn's predict_proba gives them), one class id or one value otherwise."""
    if parameters.is_classifier and parameters.predict_proba:
        return max(num_classes, 2)
    if parameters.is_classifier:
        return 1
    return num_classes


def shape_output(
    parameters: FilParameters, scores: np.ndarray, width: int | None = None
) -> np.ndarray:
    """FIL's post-processing of the model's (rows, classes) output.

    ``scores``: what the library's predict returns (probabilities for classifiers, values for
    regressors), one column per class, a binary model's positive-class probability alone.
    ``width``: the configured output's columns, where a binary model with predict_proba may ask
    for one (the positive class, Triton's original layout) or two.
    """
    scores = np.asarray(scores, dtype=np.float32)
    if scores.ndim == 1:
        scores = scores.reshape(-1, 1)
    if not parameters.is_classifier:
        return scores
    classes = scores.shape[1]
    if parameters.predict_proba:
        if classes == 1 and width != 1:
            return np.concatenate([1.0 - scores, scores], axis=1)
        return scores
    if classes > 1:
        ids: np.ndarray = np.argmax(scores, axis=1).astype(np.float32)
        return ids.reshape(-1, 1)
    decided: np.ndarray = (scores > parameters.threshold).astype(np.float32)
    return decided

"""One loader per FIL ``model_type``, each running the model through its own library.

Answers must equal what a user gets from XGBoost's, LightGBM's or scikit-learn's own predict, so
each format is predicted by the library that wrote it (XGBoost's ``inplace_predict``,
LightGBM's ``Booster.predict``) and Treelite checkpoints (scikit-learn forests) by Treelite's
GTIL, the reference predictor Triton's FIL itself falls back to on CPU. Every forest returns a
float32 (rows, classes) array: probabilities for classifiers, values for regressors.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)


class Forest(Protocol):
    num_features: int
    # Output columns of the library's predict: 1 for regressors and binary classifiers whose
    # output is the positive class's probability, one per class otherwise.
    num_classes: int

    def predict(self, rows: np.ndarray) -> np.ndarray: ...


def _failed(model: str, path: Path, model_type: str, exc: Exception) -> ConchError:
    return ConchError(
        ErrorCode.INVALID_ARG,
        f"model '{model}': '{path}' could not be read as model_type {model_type}: {exc}",
    )


class XGBoostForest:
    """XGBoost JSON, UBJSON or binary, read by XGBoost (which tells the encodings apart)."""

    def __init__(self, path: Path, nthread: int):
        import xgboost

        self.booster = xgboost.Booster(params={"nthread": nthread})
        self.booster.load_model(bytearray(path.read_bytes()))
        learner = json.loads(self.booster.save_config())["learner"]
        self.num_features = self.booster.num_features()
        self.num_classes = max(int(learner["learner_model_param"].get("num_class", "0")), 1)
        # multi:softmax predicts class ids; its probabilities are the softmax of the margins
        # (what Triton's FIL computes for predict_proba on such a model).
        self.softmax = learner["objective"]["name"] == "multi:softmax" and self.num_classes > 1

    def predict(self, rows: np.ndarray) -> np.ndarray:
        if self.softmax:
            margin = np.asarray(self.booster.inplace_predict(rows, predict_type="margin"))
            shifted = np.exp(margin - margin.max(axis=1, keepdims=True))
            probabilities: np.ndarray = shifted / shifted.sum(axis=1, keepdims=True)
            return probabilities.astype(np.float32)
        return np.asarray(self.booster.inplace_predict(rows, validate_features=False))


class TreeliteForest:
    """A Treelite model (a checkpoint, or an XGBoost binary file XGBoost no longer reads),
    predicted by GTIL."""

    def __init__(self, model: Any, nthread: int):
        import treelite.gtil

        self.model = model
        self.gtil = treelite.gtil
        self.nthread = nthread
        header = model.get_header_accessor()
        targets = int(np.asarray(header.get_field("num_target")).ravel()[0])
        if targets != 1:
            raise ConchError(
                ErrorCode.UNSUPPORTED,
                f"Treelite model has {targets} targets; FIL serves single-target models",
            )
        self.num_features = int(model.num_feature)
        self.num_classes = int(np.asarray(header.get_field("num_class")).ravel()[0])

    def predict(self, rows: np.ndarray) -> np.ndarray:
        out = self.gtil.predict(self.model, rows, nthread=self.nthread)
        return np.asarray(out).reshape(rows.shape[0], -1)


class LightGBMForest:
    """LightGBM's text format, predicted by LightGBM (probabilities for its classifiers)."""

    def __init__(self, path: Path, nthread: int):
        import lightgbm

        self.booster = lightgbm.Booster(model_file=str(path))
        self.nthread = nthread
        self.num_features = int(self.booster.num_feature())
        self.num_classes = int(self.booster.num_model_per_iteration())

    def predict(self, rows: np.ndarray) -> np.ndarray:
        out = self.booster.predict(rows, num_threads=self.nthread)
        return np.asarray(out).reshape(rows.shape[0], -1)


def load(model: str, path: Path, model_type: str, nthread: int) -> Forest:
    """The forest in ``path``; ConchError naming the file and model_type when it is not one."""
    if not path.is_file():
        raise ConchError(
            ErrorCode.NOT_FOUND,
            f"model '{model}': no file '{path}' (model_type {model_type}; set "
            "default_model_filename to use another name)",
        )
    try:
        if model_type == "lightgbm":
            return LightGBMForest(path, nthread)
        if model_type == "treelite_checkpoint":
            import treelite

            return TreeliteForest(treelite.Model.deserialize(str(path)), nthread)
        try:
            return XGBoostForest(path, nthread)
        except Exception as exc:
            if model_type != "xgboost":
                raise
            # The legacy binary format, which XGBoost 3 no longer loads; Treelite still does.
            import treelite.frontend

            log.info("xgboost could not read %s (%s); loading it with Treelite", path, exc)
            legacy = treelite.frontend.load_xgboost_model_legacy_binary(str(path))
            return TreeliteForest(legacy, nthread)
    except ConchError as exc:
        raise ConchError(exc.code, f"model '{model}': {exc.message}") from exc
    except Exception as exc:
        raise _failed(model, path, model_type, exc) from exc

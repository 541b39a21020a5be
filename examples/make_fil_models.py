#!/usr/bin/env python3
"""Write the FIL example models: small tree models trained on generated data.

    python examples/make_fil_models.py [REPO]    (default: examples/model_repository)

- ``fil_xgboost``: an XGBoost binary classifier (UBJSON, ``xgboost.ubj``), answering
  ``predict_proba`` (two columns, as XGBClassifier.predict_proba gives them);
- ``fil_xgboost_json``: an XGBoost 3-class classifier in XGBoost JSON, answering class ids;
- ``fil_lightgbm``: a LightGBM regressor (``model.txt``), answering values;
- ``fil_sklearn``: a scikit-learn RandomForestClassifier saved as a Treelite checkpoint
  (``checkpoint.tl``, the way Triton's FIL takes scikit-learn models), answering
  ``predict_proba``.

Data and models come from a fixed seed and nothing is downloaded. A model whose library is not
installed is skipped with a line saying so (``pip install 'conch[fil]'`` installs them all).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_REPOSITORY = HERE / "model_repository"
SEED = 20261128
FEATURES = 16

CONFIG = """backend: "fil"
max_batch_size: 4096
input [ {{ name: "input__0", data_type: TYPE_FP32, dims: [ {features} ] }} ]
output [ {{ name: "output__0", data_type: TYPE_FP32, dims: [ {width} ] }} ]
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
dynamic_batching {{ max_queue_delay_microseconds: 500 }}
parameters [
  {{ key: "model_type", value: {{ string_value: "{model_type}" }} }},
  {{ key: "output_class", value: {{ string_value: "{output_class}" }} }},
  {{ key: "predict_proba", value: {{ string_value: "{predict_proba}" }} }}
]
"""


def data(classes: int, rows: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Generated features and labels (class ids, or a regression target for classes=0)."""
    rng = np.random.default_rng(SEED + classes)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    signal = x[:, 0] + 0.5 * x[:, 1] * x[:, 2] - 0.8 * x[:, 3] + 0.1 * rng.standard_normal(rows)
    if classes == 0:
        return x, signal.astype(np.float32)
    edges = np.quantile(signal, np.linspace(0, 1, classes + 1)[1:-1])
    return x, np.digitize(signal, edges).astype(np.int32)


def write(repo: Path, name: str, filename: str, config: str) -> Path:
    version = repo / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (repo / name / "config.pbtxt").write_text(config)
    return version / filename


def config(model_type: str, width: int, output_class: bool, predict_proba: bool) -> str:
    return CONFIG.format(
        features=FEATURES,
        width=width,
        model_type=model_type,
        output_class=str(output_class).lower(),
        predict_proba=str(predict_proba).lower(),
    )


def fil_xgboost(repo: Path) -> None:
    import xgboost

    x, y = data(2)
    params = {"objective": "binary:logistic", "max_depth": 4, "seed": SEED, "nthread": 1}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=40)
    booster.save_model(
        write(repo, "fil_xgboost", "xgboost.ubj", config("xgboost_ubj", 2, True, True))
    )


def fil_xgboost_json(repo: Path) -> None:
    import xgboost

    x, y = data(3)
    params = {
        "objective": "multi:softprob",
        "num_class": 3,
        "max_depth": 4,
        "seed": SEED,
        "nthread": 1,
    }
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=30)
    booster.save_model(
        write(repo, "fil_xgboost_json", "xgboost.json", config("xgboost_json", 1, True, False))
    )


def fil_lightgbm(repo: Path) -> None:
    import lightgbm

    x, y = data(0)
    params = {"objective": "regression", "num_leaves": 15, "seed": SEED, "verbose": -1}
    params["num_threads"] = 1
    booster = lightgbm.train(params, lightgbm.Dataset(x, label=y), num_boost_round=40)
    booster.save_model(
        write(repo, "fil_lightgbm", "model.txt", config("lightgbm", 1, False, False))
    )


def sklearn_forest() -> Any:
    """The scikit-learn forest behind ``fil_sklearn`` (the same every call: fixed seeds)."""
    from sklearn.ensemble import RandomForestClassifier

    x, y = data(3)
    return RandomForestClassifier(n_estimators=20, max_depth=6, random_state=SEED).fit(x, y)


def fil_sklearn(repo: Path) -> None:
    import treelite.sklearn

    checkpoint = treelite.sklearn.import_model(sklearn_forest())
    path = write(repo, "fil_sklearn", "checkpoint.tl", config("treelite_checkpoint", 3, True, True))
    checkpoint.serialize(str(path))


MODELS: dict[str, tuple[tuple[str, ...], Callable[[Path], None]]] = {
    "fil_xgboost": (("xgboost",), fil_xgboost),
    "fil_xgboost_json": (("xgboost",), fil_xgboost_json),
    "fil_lightgbm": (("lightgbm",), fil_lightgbm),
    "fil_sklearn": (("sklearn", "treelite"), fil_sklearn),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", nargs="?", type=Path, default=DEFAULT_REPOSITORY)
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="only these")
    args = parser.parse_args(argv)
    for name in args.model or list(MODELS):
        needs, make = MODELS[name]
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            print(f"skipped {name}: {', '.join(missing)} not installed (pip install 'conch[fil]')")
            continue
        make(args.repository)
        print(f"wrote {args.repository / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

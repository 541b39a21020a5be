"""The FIL backend's rules: Triton FIL's parameters, file names, output shaping and config checks,
then a tiny XGBoost model loaded, auto-completed and batched in-process (no mesh)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pytest

from shared.model_config import InstanceGroup, ModelConfig, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import LoadSpec, ModelRequest
from workers.fil.backend import FilBackend, check_config
from workers.fil.parameters import (
    MODEL_FILENAMES,
    FilParameters,
    model_filename,
    output_width,
    parse,
    shape_output,
)


def test_defaults_are_tritons() -> None:
    parameters = parse("m", {})
    assert parameters.model_type == "xgboost"
    assert not parameters.is_classifier and not parameters.predict_proba
    assert parameters.threshold == 0.5 and parameters.notes == []


def test_every_model_type_has_fils_default_file_name() -> None:
    assert MODEL_FILENAMES == {
        "xgboost": "xgboost.model",
        "xgboost_json": "xgboost.json",
        "xgboost_ubj": "xgboost.ubj",
        "lightgbm": "model.txt",
        "treelite_checkpoint": "checkpoint.tl",
    }
    for model_type, filename in MODEL_FILENAMES.items():
        assert model_filename("", parse("m", {"model_type": model_type})) == filename
    assert model_filename("forest.bin", parse("m", {"model_type": "lightgbm"})) == "forest.bin"


@pytest.mark.parametrize("model_type", ["sklearn", "onnx", "XGBoost", ""])
def test_an_unknown_model_type_is_refused_naming_the_choices(model_type: str) -> None:
    with pytest.raises(ConchError) as caught:
        parse("forest", {"model_type": model_type})
    assert caught.value.code == ErrorCode.UNSUPPORTED
    message = caught.value.message
    assert "not recognized as a valid serialization format" in message
    assert "'forest'" in message and "treelite_checkpoint" in message
    assert ("Treelite checkpoint" in message) == (model_type == "sklearn")


def test_output_class_is_the_old_name_of_is_classifier_and_wins() -> None:
    assert parse("m", {"is_classifier": "true"}).is_classifier
    assert parse("m", {"output_class": "TRUE"}).is_classifier
    assert not parse("m", {"is_classifier": "true", "output_class": "false"}).is_classifier


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("output_class", "yes"),
        ("predict_proba", "maybe"),
        ("threshold", "half"),
        ("threshold", "nan"),
        ("storage_type", "HUGE"),
        ("algo", "FAST"),
        ("layout", "sideways"),
        ("threads_per_tree", "0"),
        ("blocks_per_sm", "-1"),
        ("transfer_threshold", "x"),
        ("cpu_nthread", "-2"),
        ("use_experimental_optimizations", "on"),
    ],
)
def test_a_bad_value_is_refused_naming_key_and_value(key: str, value: str) -> None:
    with pytest.raises(ConchError) as caught:
        parse("m", {key: value})
    assert caught.value.code == ErrorCode.INVALID_ARG
    assert f"'{key}' is '{value}'; expected" in caught.value.message


def test_gpu_only_options_are_accepted_and_noted() -> None:
    parameters = parse(
        "m",
        {
            "storage_type": "sparse",
            "algo": "TREE_REORG",
            "threads_per_tree": "4",
            "blocks_per_sm": "0",
            "transfer_threshold": "2",
            "use_experimental_optimizations": "true",
        },
    )
    assert len(parameters.notes) == 6
    assert any(
        note.startswith("parameter storage_type=sparse ignored") for note in parameters.notes
    )


def test_threshold_and_threads() -> None:
    assert parse("m", {"threshold": "0.3"}).threshold == pytest.approx(0.3)
    assert parse("m", {}).cpu_nthread == 1  # one thread per instance unless asked
    assert parse("m", {"cpu_nthread": "-1"}).cpu_nthread == 0  # Triton's "every core"
    assert parse("m", {"cpu_nthread": "3"}).cpu_nthread == 3


CLASSIFIER = FilParameters(is_classifier=True)
PROBA = FilParameters(is_classifier=True, predict_proba=True)


def test_output_width() -> None:
    assert output_width(FilParameters(), 1) == 1  # regression
    assert output_width(CLASSIFIER, 1) == 1 and output_width(CLASSIFIER, 4) == 1  # class ids
    assert output_width(PROBA, 1) == 2  # binary: both classes, as predict_proba
    assert output_width(PROBA, 4) == 4


def test_regression_values_pass_through_as_one_column() -> None:
    out = shape_output(FilParameters(), np.array([1.5, -2.0]))
    np.testing.assert_array_equal(out, [[1.5], [-2.0]])
    assert out.dtype == np.float32


def test_binary_class_is_above_the_threshold() -> None:
    scores = np.array([0.2, 0.5, 0.51, 0.9], dtype=np.float32)
    np.testing.assert_array_equal(shape_output(CLASSIFIER, scores), [[0], [0], [1], [1]])
    high = FilParameters(is_classifier=True, threshold=0.8)
    np.testing.assert_array_equal(shape_output(high, scores), [[0], [0], [0], [1]])


def test_binary_predict_proba_gives_two_columns_or_one_when_configured() -> None:
    scores = np.array([0.25, 0.75], dtype=np.float32)
    np.testing.assert_allclose(shape_output(PROBA, scores), [[0.75, 0.25], [0.25, 0.75]])
    np.testing.assert_allclose(shape_output(PROBA, scores, width=1), [[0.25], [0.75]])


def test_multiclass_class_ids_and_probabilities() -> None:
    scores = np.array([[0.1, 0.7, 0.2], [0.5, 0.1, 0.4]], dtype=np.float32)
    np.testing.assert_array_equal(shape_output(CLASSIFIER, scores), [[1], [0]])
    np.testing.assert_array_equal(shape_output(PROBA, scores), scores)


def _config(features: int = 4, width: int = 2, proba: str = "true", extra: str = "") -> ModelConfig:
    return parse_pbtxt(
        f"""
        name: "forest" backend: "fil" max_batch_size: 64
        input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
        output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
        parameters [
          {{ key: "model_type" value: {{ string_value: "xgboost_json" }} }},
          {{ key: "output_class" value: {{ string_value: "true" }} }},
          {{ key: "predict_proba" value: {{ string_value: "{proba}" }} }}
        ]
        {extra}
        """
    )


def test_check_config_against_the_model() -> None:
    assert check_config(_config(), PROBA, 4, 1) == 2
    assert check_config(_config(width=1), PROBA, 4, 1) == 1  # Triton's one-column binary
    with pytest.raises(ConchError, match=r"input 'input__0' has dims \[5\]; .* needs 4"):
        check_config(_config(features=5), PROBA, 4, 1)
    with pytest.raises(ConchError, match=r"output 'output__0' has dims \[2\]; .* needs 3"):
        check_config(_config(), PROBA, 4, 3)


def test_the_tensors_must_be_fils_names_and_fp32() -> None:
    renamed = parse_pbtxt(
        """name: "f" backend: "fil" max_batch_size: 8
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]"""
    )
    with pytest.raises(ConchError, match=r"one input named 'input__0'.*\['x'\]"):
        check_config(renamed, CLASSIFIER, 4, 1)
    doubles = parse_pbtxt(
        """name: "f" backend: "fil" max_batch_size: 8
        input [ { name: "input__0" data_type: TYPE_FP64 dims: [ 4 ] } ]
        output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]"""
    )
    with pytest.raises(ConchError, match="is FP64; expected TYPE_FP32"):
        check_config(doubles, CLASSIFIER, 4, 1)


# --- a real model, in-process ---------------------------------------------------------------


@pytest.fixture(scope="module")
def xgb_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    xgboost = pytest.importorskip("xgboost")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    booster = xgboost.train(
        {"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
        xgboost.DMatrix(x, label=y),
        num_boost_round=8,
    )
    version = tmp_path_factory.mktemp("forest") / "1"
    version.mkdir()
    booster.save_model(version / "xgboost.json")
    return version, x


def _spec(config: ModelConfig, version: Path, kind: str = "KIND_CPU") -> LoadSpec:
    group = InstanceGroup(name="g", kind=kind, count=1)
    return LoadSpec(config, 1, version, version.parent, group, 0)


def test_a_batch_equals_the_librarys_predict_proba(xgb_model: tuple[Path, np.ndarray]) -> None:
    import xgboost

    version, x = xgb_model
    instance = FilBackend().load(_spec(_config(), version))
    requests = [
        ModelRequest("a", {"input__0": x[:3]}, ["output__0"]),
        ModelRequest("b", {"input__0": x[3:8]}, ["output__0"]),
    ]
    results = instance.execute(requests).results
    classifier = xgboost.XGBClassifier()
    classifier.load_model(version / "xgboost.json")
    expected = classifier.predict_proba(x[:8])
    np.testing.assert_array_equal(results[0].outputs["output__0"], expected[:3])
    np.testing.assert_array_equal(results[1].outputs["output__0"], expected[3:8])


def test_wrong_feature_count_at_run_time(xgb_model: tuple[Path, np.ndarray]) -> None:
    version, x = xgb_model
    instance = FilBackend().load(_spec(_config(), version))
    result = instance.execute([ModelRequest("a", {"input__0": x[:2, :3]}, ["output__0"])])
    error = result.results[0].error
    assert error is not None and error.code == ErrorCode.INVALID_ARG
    assert "expected FP32 rows of 4 features" in error.message


def test_auto_complete_reads_features_and_classes(xgb_model: tuple[Path, np.ndarray]) -> None:
    version, _ = xgb_model
    bare = parse_pbtxt(
        """name: "f" backend: "fil" max_batch_size: 8
        parameters [
          { key: "model_type" value: { string_value: "xgboost_json" } },
          { key: "output_class" value: { string_value: "true" } },
          { key: "predict_proba" value: { string_value: "true" } }
        ]"""
    )
    completed = FilBackend().auto_complete(bare, version / bare.model_filename)
    assert completed is not None
    assert completed["input"] == [{"name": "input__0", "data_type": "TYPE_FP32", "dims": [4]}]
    assert completed["output"] == [{"name": "output__0", "data_type": "TYPE_FP32", "dims": [2]}]


def test_load_errors_name_the_file_and_the_kind(xgb_model: tuple[Path, np.ndarray]) -> None:
    version, _ = xgb_model
    with pytest.raises(ConchError) as missing:
        FilBackend().load(_spec(_config(extra='default_model_filename: "nope.json"'), version))
    assert missing.value.code == ErrorCode.NOT_FOUND and "nope.json" in missing.value.message
    config = _config(extra='default_model_filename: "xgboost.json"')
    as_lightgbm = msgspec.structs.replace(config, parameters={"model_type": "lightgbm"})
    with pytest.raises(ConchError, match="could not be read as model_type lightgbm"):
        FilBackend().load(_spec(as_lightgbm, version))
    with pytest.raises(ConchError, match="KIND_CPU or KIND_AUTO instead of KIND_GPU"):
        FilBackend().load(_spec(_config(), version, kind="KIND_GPU"))


def _save_and_expect(kind: str, version: Path) -> tuple[str, str, str, np.ndarray, np.ndarray]:
    """(model_type, parameters, dims, rows, the library's own answer) for one format."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((200, 4)).astype(np.float32)
    y3 = np.digitize(x[:, 0] + x[:, 1], [-0.5, 0.5])
    if kind == "xgboost_softmax":  # class ids from xgboost, FIL's argmax of the softmax
        xgboost = pytest.importorskip("xgboost")
        params = {"objective": "multi:softmax", "num_class": 3, "max_depth": 3, "nthread": 1}
        booster = xgboost.train(params, xgboost.DMatrix(x, label=y3), num_boost_round=5)
        booster.save_model(version / "xgboost.ubj")
        expected = booster.predict(xgboost.DMatrix(x)).reshape(-1, 1)
        return "xgboost_ubj", "false", "1", x, expected
    if kind == "lightgbm_multiclass":
        lightgbm = pytest.importorskip("lightgbm")
        params = {"objective": "multiclass", "num_class": 3, "verbose": -1, "num_threads": 1}
        booster = lightgbm.train(params, lightgbm.Dataset(x, label=y3), num_boost_round=5)
        booster.save_model(version / "model.txt")
        return "lightgbm", "true", "3", x, booster.predict(x)
    pytest.importorskip("treelite")
    import treelite.sklearn
    from sklearn.ensemble import ExtraTreesClassifier

    forest = ExtraTreesClassifier(n_estimators=5, max_depth=4, random_state=0).fit(x, y3 > 0)
    treelite.sklearn.import_model(forest).serialize(str(version / "checkpoint.tl"))
    return "treelite_checkpoint", "true", "2", x, forest.predict_proba(x)


@pytest.mark.parametrize("kind", ["xgboost_softmax", "lightgbm_multiclass", "sklearn_binary"])
def test_each_format_answers_what_its_library_predicts(kind: str, tmp_path: Path) -> None:
    version = tmp_path / "1"
    version.mkdir()
    model_type, proba, width, x, expected = _save_and_expect(kind, version)
    config = parse_pbtxt(
        f"""name: "f" backend: "fil" max_batch_size: 256
        input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
        parameters [
          {{ key: "model_type" value: {{ string_value: "{model_type}" }} }},
          {{ key: "output_class" value: {{ string_value: "true" }} }},
          {{ key: "predict_proba" value: {{ string_value: "{proba}" }} }}
        ]"""
    )
    instance = FilBackend().load(_spec(config, version))
    requests = [ModelRequest(str(i), {"input__0": x[i::4]}, ["output__0"]) for i in range(4)]
    results = instance.execute(requests).results
    for i, result in enumerate(results):
        assert result.error is None, result.error
        np.testing.assert_allclose(
            result.outputs["output__0"], expected[i::4], rtol=1e-6, atol=1e-7
        )

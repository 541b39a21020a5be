"""The TensorFlow backend: Triton's signature rules (pure, no TensorFlow) and, on a tiny
SavedModel written by the test, auto-complete, signature selection and answers equal to
TensorFlow's own call of the loaded SavedModel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.model_config import ModelConfig, from_json, parse_pbtxt
from shared.storage.repository import read_model
from shared.wire.errors import ConchError
from workers.backend import LoadSpec, ModelRequest
from workers.tensorflow import signature as rules
from workers.tensorflow.parameters import SessionSettings


def _config(text: str) -> ModelConfig:
    return parse_pbtxt('name: "m"\nplatform: "tensorflow_savedmodel"\n' + text)


def _sig(inputs: dict[str, list[int] | None], outputs: dict[str, list[int] | None]) -> Any:
    def tensors(shapes: dict[str, list[int] | None], dtype: str) -> dict[str, Any]:
        return {k: rules.SignatureTensor(k, f"{k}:0", dtype, s) for k, s in shapes.items()}

    return rules.Signature("serving_default", tensors(inputs, "FP32"), tensors(outputs, "INT64"))


# -- signature selection ---------------------------------------------------------------------


def test_serving_default_unless_the_parameter_names_another() -> None:
    keys = ["__saved_model_init_op", "other", "serving_default"]
    assert rules.choose_signature("m", keys, "") == "serving_default"
    assert rules.choose_signature("m", keys, "other") == "other"
    # No serving_default: Triton takes the first signature that is not an init/train op.
    assert rules.choose_signature("m", ["__saved_model_init_op", "predict"], "") == "predict"


def test_a_named_signature_that_is_missing_is_an_error_naming_it() -> None:
    with pytest.raises(ConchError, match=r"expected 'scoring' signature.*'serving_default'"):
        rules.choose_signature("m", ["serving_default", "__saved_model_init_op"], "scoring")
    with pytest.raises(ConchError, match="expected 'serving_default' signature"):
        rules.choose_signature("m", ["__saved_model_init_op"], "")


def test_parameters_use_triton_keys_and_default_to_one_thread() -> None:
    assert SessionSettings.from_parameters("m", {}) == SessionSettings(1, 1, True, "serve", "")
    settings = SessionSettings.from_parameters(
        "m",
        {
            "TF_NUM_INTRA_THREADS": "2",
            "TF_NUM_INTER_THREADS": "3",
            "TF_USE_PER_SESSION_THREADS": "off",
            "TF_GRAPH_TAG": "serve1",
            "TF_SIGNATURE_DEF": "serving2",
        },
    )
    assert settings == SessionSettings(2, 3, False, "serve1", "serving2")
    with pytest.raises(ConchError, match="'TF_NUM_INTRA_THREADS' must be non-negative"):
        SessionSettings.from_parameters("m", {"TF_NUM_INTRA_THREADS": "-1"})
    with pytest.raises(ConchError, match="'MAX_SESSION_SHARE_COUNT' must be positive"):
        SessionSettings.from_parameters("m", {"MAX_SESSION_SHARE_COUNT": "0"})


# -- auto-complete ----------------------------------------------------------------------------


def test_a_batching_signature_completes_max_batch_size_dims_and_dynamic_batching() -> None:
    completed = rules.auto_complete(_config(""), _sig({"x": [-1, 8]}, {"y": [-1, 4], "n": [-1]}))
    assert completed["max_batch_size"] == rules.DEFAULT_MAX_BATCH_SIZE == 4
    assert completed["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [8]}]
    outputs = {o["name"]: o for o in completed["output"]}
    assert outputs["y"] == {"name": "y", "data_type": "TYPE_INT64", "dims": [4]}
    # A [batch] tensor: dims [1] and an empty reshape, as Triton writes it.
    assert outputs["n"]["dims"] == [1] and outputs["n"]["reshape"] == {"shape": []}
    assert completed["dynamic_batching"] == {}


def test_a_fixed_first_dimension_does_not_batch() -> None:
    completed = rules.auto_complete(_config(""), _sig({"x": [2, 8]}, {"y": [2, 4]}))
    assert completed["max_batch_size"] == 0
    assert completed["input"][0]["dims"] == [2, 8]
    assert "dynamic_batching" not in completed
    with pytest.raises(ConchError, match="specified max-batch 8 but model signature does not"):
        rules.auto_complete(_config("max_batch_size: 8"), _sig({"x": [2, 8]}, {"y": [2, 4]}))


def test_listed_dims_with_the_whole_shape_keep_the_model_unbatched() -> None:
    config = _config('input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 8 ] } ]')
    completed = rules.auto_complete(config, _sig({"x": [-1, 8]}, {"y": [-1, 4]}))
    assert completed["max_batch_size"] == 0
    assert completed["output"] == [{"name": "y", "data_type": "TYPE_INT64", "dims": [-1, 4]}]
    batched = _config('input [ { name: "x" data_type: TYPE_FP32 dims: [ 8 ] } ]')
    assert rules.auto_complete(batched, _sig({"x": [-1, 8]}, {"y": [-1, 4]}))["max_batch_size"] == 4


def test_only_the_listed_outputs_are_completed_and_scalars_cannot_be() -> None:
    config = _config('max_batch_size: 2\noutput [ { name: "y" data_type: TYPE_INT64 dims: [4] } ]')
    completed = rules.auto_complete(config, _sig({"x": [-1, 8]}, {"y": [-1, 4], "z": [-1, 1]}))
    assert [o["name"] for o in completed["output"]] == ["y"]
    assert completed["max_batch_size"] == 2
    with pytest.raises(ConchError, match="rank of model tensor 'x' is 0"):
        rules.auto_complete(_config(""), _sig({"x": []}, {"y": [-1]}))


def test_the_configuration_is_checked_against_the_signature() -> None:
    signature = _sig({"x": [-1, 8]}, {"y": [-1, 4]})
    good = 'max_batch_size: 4\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 8 ] } ]\n'
    rules.check_config(
        _config(good + 'output [{name: "y" data_type: TYPE_INT64 dims: [4]}]'), signature
    )
    with pytest.raises(ConchError, match=r"unexpected inference input 'X'.*\['x'\]"):
        rules.check_config(_config(good.replace('"x"', '"X"')), signature)
    with pytest.raises(ConchError, match="expects datatype TYPE_INT32 for input 'x', model "):
        rules.check_config(_config(good.replace("TYPE_FP32", "TYPE_INT32")), signature)
    with pytest.raises(ConchError, match=r"model expects 2 dimensions \(shape \[-1, 8\]\)"):
        rules.check_config(_config(good.replace("[ 8 ]", "[ 8, 1 ]")), signature)
    with pytest.raises(ConchError, match=r"tensor 'y': .*complete shape \[-1, 5\]"):
        rules.check_config(
            _config(good + 'output [{name: "y" data_type: TYPE_INT64 dims: [5]}]'), signature
        )


# -- a real SavedModel -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory holding a SavedModel with two signatures and no config.pbtxt."""
    tf = pytest.importorskip("tensorflow")

    class Tiny(tf.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4) / 10)
            self.affine = tf.function(
                lambda x: {"y": tf.matmul(x, self.w), "total": tf.reduce_sum(x, axis=1)},
                input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")],
            )
            self.shout = tf.function(
                lambda words: {"loud": tf.strings.upper(words)},
                input_signature=[tf.TensorSpec([None], tf.string, name="words")],
            )

    root = tmp_path_factory.mktemp("tf_unit") / "tiny"
    module = Tiny()
    signatures = {"serving_default": module.affine, "shout": module.shout}
    tf.saved_model.save(module, str(root / "1" / "model.savedmodel"), signatures=signatures)
    return root


def _load(model_dir: Path, overrides: dict[str, Any] | None = None) -> Any:
    """Auto-complete (with the overrides in the configuration first) and load version 1."""
    from workers.tensorflow.backend import TensorFlowBackend

    model = read_model(model_dir)
    given = from_json({**model.config.json, **(overrides or {})}, model_dir=model_dir)
    backend = TensorFlowBackend()
    completed = backend.auto_complete(given, model.version_path(1) / "model.savedmodel")
    assert completed is not None
    config = from_json(completed, model_dir=model_dir)
    spec = LoadSpec(config, 1, model.version_path(1), model_dir, config.instance_groups[0], 0)
    return config, backend.load(spec)


def test_auto_complete_reads_the_serving_signature_of_a_saved_model(saved: Path) -> None:
    config, instance = _load(saved)
    assert config.platform == "tensorflow_savedmodel"
    assert config.max_batch_size == 4 and config.dynamic_batching is not None
    assert [(s.name, s.datatype, s.dims) for s in config.inputs] == [("x", "FP32", [3])]
    assert {s.name: s.dims for s in config.outputs} == {"total": [1], "y": [4]}
    instance.unload()


def test_batched_execution_equals_tensorflow_and_reshapes_a_batch_only_output(saved: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    _, instance = _load(saved)
    rng = np.random.default_rng(3)
    requests = [
        ModelRequest(f"r{n}", {"x": rng.standard_normal((n, 3)).astype(np.float32)}, ["y", "total"])
        for n in (1, 2)
    ]
    execution = instance.execute(requests)  # one batch of 3 rows, split back
    reference = tf.saved_model.load(str(saved / "1" / "model.savedmodel")).signatures
    for request, result in zip(requests, execution.results, strict=True):
        assert result.error is None, result.error
        expected = reference["serving_default"](x=tf.constant(request.inputs["x"]))
        np.testing.assert_allclose(result.outputs["y"], expected["y"].numpy(), rtol=1e-6)
        # "total" is [batch] in the model and [batch, 1] for Triton (dims [1], reshape []).
        np.testing.assert_allclose(
            result.outputs["total"][:, 0], expected["total"].numpy(), rtol=1e-6
        )
    instance.unload()


def test_tf_signature_def_selects_another_signature_with_bytes(saved: Path) -> None:
    overrides = {
        "parameters": {"TF_SIGNATURE_DEF": {"string_value": "shout"}},
        "input": [{"name": "words", "data_type": "TYPE_STRING", "dims": [-1]}],
    }
    config, instance = _load(saved, overrides)
    # Unbatched (dims cover the whole shape); the outputs come from the named signature.
    assert config.max_batch_size == 0 and config.dynamic_batching is None
    assert [(s.name, s.datatype, s.dims) for s in config.outputs] == [("loud", "BYTES", [-1])]
    words = np.array(["café".encode(), b"tf"], dtype=object)
    result = instance.execute([ModelRequest("r", {"words": words}, ["loud"])]).results[0]
    assert result.error is None, result.error
    assert list(result.outputs["loud"]) == ["CAFé".encode(), b"TF"]
    instance.unload()


def test_a_missing_signature_or_tag_fails_the_load_naming_it(saved: Path) -> None:
    with pytest.raises(ConchError, match="expected 'nope' signature"):
        _load(saved, {"parameters": {"TF_SIGNATURE_DEF": {"string_value": "nope"}}})
    with pytest.raises(ConchError, match="expected 'gpu' tag"):
        _load(saved, {"parameters": {"TF_GRAPH_TAG": {"string_value": "gpu"}}})


def test_a_graphdef_model_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from workers.tensorflow.backend import TensorFlowBackend

    config = parse_pbtxt(
        'name: "g"\nplatform: "tensorflow_graphdef"\n'
        'input [{name: "x" data_type: TYPE_FP32 dims: [1]}]\n'
        'output [{name: "y" data_type: TYPE_FP32 dims: [1]}]'
    )
    assert config.backend == "tensorflow"  # Triton's mapping: the tensorflow worker answers
    spec = LoadSpec(config, 1, tmp_path / "1", tmp_path, config.instance_groups[0], 0)
    with pytest.raises(ConchError, match=r"'tensorflow_graphdef' is not served.*SavedModel"):
        TensorFlowBackend().load(spec)

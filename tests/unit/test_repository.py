"""Model repository scanning, and the example repository that ``examples/make_models.py`` writes.

Triton loads every model it can and reports the rest, so one broken ``config.pbtxt`` must never
hide the healthy models beside it; and the versions served are those the version policy picks
from the numeric directories actually on disk.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from shared.model_config import parse_pbtxt
from shared.storage.repository import read_model, scan
from shared.wire.errors import ConchError, ErrorCode

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def add_model(
    root: Path, name: str, config: str | None, versions: tuple[str, ...] = ("1",)
) -> Path:
    """A model directory with an optional config.pbtxt and the given version directories."""
    model_dir = root / name
    model_dir.mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config, encoding="utf-8")
    for version in versions:
        (model_dir / version).mkdir()
    return model_dir


def onnx_config(name: str, extra: str = "") -> str:
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\n{extra}'


# --- scan ---------------------------------------------------------------------------------------


def test_scan_finds_numeric_versions_in_numeric_order(tmp_path: Path) -> None:
    model_dir = add_model(
        tmp_path, "m", onnx_config("m"), versions=("1", "10", "2", "latest", "v3", "0", "-1")
    )
    (model_dir / "7").write_text("a file, not a version directory")
    result = scan(tmp_path)
    assert result.errors == {}
    model = result.models["m"]
    assert model.name == "m"
    assert model.path == model_dir
    assert model.available_versions == [1, 2, 10]
    assert model.versions == [10]  # Triton's default: the latest one
    assert model.version_path(2) == model_dir / "2"


def test_scan_applies_each_models_version_policy(tmp_path: Path) -> None:
    versions = ("1", "2", "3")
    add_model(
        tmp_path,
        "latest2",
        onnx_config("latest2", "version_policy { latest { num_versions: 2 } }"),
        versions,
    )
    add_model(tmp_path, "all", onnx_config("all", "version_policy { all { } }"), versions)
    add_model(
        tmp_path,
        "specific",
        onnx_config("specific", "version_policy { specific { versions: [ 1, 3, 5 ] } }"),
        versions,
    )
    models = scan(tmp_path).models
    assert models["latest2"].versions == [2, 3]
    assert models["all"].versions == [1, 2, 3]
    assert models["specific"].versions == [1, 3]


def test_a_model_without_versions_has_none_to_load(tmp_path: Path) -> None:
    add_model(tmp_path, "empty", onnx_config("empty"), versions=())
    model = scan(tmp_path).models["empty"]
    assert model.available_versions == []
    assert model.versions == []


def test_scan_records_broken_models_and_loads_the_rest(tmp_path: Path) -> None:
    add_model(tmp_path, "good", onnx_config("good"))
    add_model(tmp_path, "typo", onnx_config("typo", "max_batch: 8\n"))
    add_model(tmp_path, "noconfig", None)
    add_model(tmp_path, "renamed", onnx_config("other"))
    add_model(tmp_path, "badbatch", onnx_config("badbatch", "max_batch_size: -3\n"))
    add_model(tmp_path, "zz_good", onnx_config("zz_good"))

    result = scan(tmp_path)

    assert sorted(result.models) == ["good", "zz_good"]
    assert sorted(result.errors) == ["badbatch", "noconfig", "renamed", "typo"]
    assert result.errors["typo"].startswith(f"{tmp_path / 'typo' / 'config.pbtxt'}:3:1")
    assert '"max_batch"' in result.errors["typo"]
    assert "no config.pbtxt" in result.errors["noconfig"]
    assert (
        "field 'name' is 'other' but the model directory is 'renamed'" in (result.errors["renamed"])
    )
    assert "field 'max_batch_size' is -3" in result.errors["badbatch"]


def test_scan_skips_hidden_directories_and_plain_files(tmp_path: Path) -> None:
    add_model(tmp_path, "m", onnx_config("m"))
    add_model(tmp_path, ".ipynb_checkpoints", None)
    (tmp_path / "README.md").write_text("not a model")
    result = scan(tmp_path)
    assert list(result.models) == ["m"]
    assert result.errors == {}


def test_scan_of_an_empty_repository_finds_nothing(tmp_path: Path) -> None:
    result = scan(tmp_path)
    assert (result.models, result.errors) == ({}, {})


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_scan_rejects_a_repository_that_is_not_a_directory(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "repo"
    if kind == "file":
        path.write_text("")
    with pytest.raises(ConchError) as info:
        scan(path)
    assert info.value.code is ErrorCode.INVALID_ARG
    assert info.value.message == f"model repository '{path}' is not a directory"


def test_read_model_with_an_override_config_ignores_the_file(tmp_path: Path) -> None:
    """A load request may carry its own config; the directory still supplies the versions."""
    model_dir = add_model(tmp_path, "m", onnx_config("m", "max_batch: 1\n"), versions=("4", "5"))
    override = parse_pbtxt(onnx_config("m", "version_policy { all { } }\n"))
    model = read_model(model_dir, override)
    assert model.config is override
    assert model.versions == [4, 5]


def test_a_unicode_digit_directory_does_not_break_the_scan(tmp_path: Path) -> None:
    add_model(tmp_path, "m", onnx_config("m"), versions=("1", "\u00b2"))
    assert scan(tmp_path).models["m"].available_versions == [1]


def test_a_zero_padded_version_is_not_counted_twice(tmp_path: Path) -> None:
    add_model(tmp_path, "m", onnx_config("m"), versions=("1", "01"))
    assert scan(tmp_path).models["m"].available_versions == [1]


# --- the example repository ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def make_models() -> ModuleType:
    """examples/make_models.py, imported from its path (examples/ is not a package)."""
    pytest.importorskip("onnx")
    spec = importlib.util.spec_from_file_location("conch_make_models", EXAMPLES / "make_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example_repo(make_models: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("example_repo")
    make_models.write_repository(root)
    return root


def test_example_repository_scans_cleanly(example_repo: Path) -> None:
    result = scan(example_repo)
    assert result.errors == {}
    assert sorted(result.models) == [
        "add_sub",
        "add_sub_chain",
        "custom_identity_int32",
        "ens_preprocess",
        "ens_summary",
        "mlp",
        "mlp_cached",
        "mlp_ensemble",
        "sequence_accumulator",
        "simple",
        "simple_ab",
        "simple_dyna_sequence",
        "simple_int8",
        "simple_sequence",
    ]
    for model in result.models.values():
        # simple_ab has two versions, both loaded (version_policy all), for A/B weights.
        versions = [1, 2] if model.name == "simple_ab" else [1]
        assert model.available_versions == versions
        assert model.versions == versions
        if model.config.platform == "ensemble":  # an empty version directory, no model file
            assert model.name in ("mlp_ensemble", "add_sub_chain")
            continue
        assert (model.path / "1" / model.config.model_filename).is_file()
        assert model.config.backend == "onnxruntime"


PAIR_IN = {"INPUT0": [16], "INPUT1": [16]}
PAIR_OUT = {"OUTPUT0": [16], "OUTPUT1": [16]}


@pytest.mark.parametrize(
    ("name", "max_batch", "delay_us", "datatype", "inputs", "outputs"),
    [
        ("simple", 8, 1000, "INT32", PAIR_IN, PAIR_OUT),
        ("add_sub", 64, 2000, "FP32", PAIR_IN, PAIR_OUT),
        ("mlp", 64, 2000, "FP32", {"INPUT0": [256]}, {"OUTPUT0": [16]}),
    ],
)
def test_example_configs_are_what_the_readme_says(
    example_repo: Path,
    name: str,
    max_batch: int,
    delay_us: int,
    datatype: str,
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
) -> None:
    config = scan(example_repo).models[name].config
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == max_batch
    assert config.dynamic_batching is not None
    assert config.dynamic_batching.max_queue_delay_microseconds == delay_us
    assert {s.name: s.dims for s in config.inputs} == inputs
    assert {s.name: s.dims for s in config.outputs} == outputs
    assert {s.datatype for s in config.inputs + config.outputs} == {datatype}


def test_example_repository_is_byte_identical_across_runs(
    make_models: ModuleType, example_repo: Path, tmp_path: Path
) -> None:
    make_models.write_repository(tmp_path, ["simple", "mlp"])
    for name in ("simple", "mlp"):
        for rel in ("config.pbtxt", "1/model.onnx"):
            assert (tmp_path / name / rel).read_bytes() == (example_repo / name / rel).read_bytes()
    assert not (tmp_path / "add_sub").exists()


def test_example_models_use_ir8_and_opset17(example_repo: Path) -> None:
    onnx = pytest.importorskip("onnx")
    for name in ("simple", "mlp", "add_sub"):
        model = onnx.load(str(example_repo / name / "1" / "model.onnx"))
        assert model.ir_version == 8
        assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]


def test_write_repository_rejects_unknown_names(make_models: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown example model"):
        make_models.write_repository(tmp_path, ["resnet"])


def test_example_models_compute_what_they_claim(
    make_models: ModuleType, example_repo: Path
) -> None:
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(7)

    def run(name: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        path = str(example_repo / name / "1" / "model.onnx")
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return session.run(None, feeds)

    a = rng.integers(-1000, 1000, (8, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (8, 16), dtype=np.int32)
    total, diff = run("simple", {"INPUT0": a, "INPUT1": b})
    assert total.dtype == np.int32
    assert np.array_equal(total, a + b) and np.array_equal(diff, a - b)

    x = rng.standard_normal((3, 16), dtype=np.float32)
    y = rng.standard_normal((3, 16), dtype=np.float32)
    total, diff = run("add_sub", {"INPUT0": x, "INPUT1": y})
    assert np.array_equal(total, x + y) and np.array_equal(diff, x - y)

    w0, w1, w2 = make_models.mlp_weights()
    assert (w0.shape, w1.shape, w2.shape) == ((256, 1024), (1024, 1024), (1024, 16))
    batch = rng.standard_normal((5, 256), dtype=np.float32)
    [out] = run("mlp", {"INPUT0": batch})
    reference = np.maximum(np.maximum(batch @ w0, 0) @ w1, 0) @ w2
    assert out.shape == (5, 16)
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-4)


def test_mlp_weights_follow_the_benchmark_harness_recipe(make_models: ModuleType) -> None:
    """Same seed and draw order as the bench harness, so both serve the same mlp."""
    rng = np.random.default_rng(20261121)
    for weight, (n_in, n_out) in zip(
        make_models.mlp_weights(), [(256, 1024), (1024, 1024), (1024, 16)], strict=True
    ):
        expected = (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        assert weight.dtype == np.float32
        assert np.array_equal(weight, expected)


def test_example_sequence_models_compute_what_triton_and_the_readme_say(
    example_repo: Path,
) -> None:
    ort = pytest.importorskip("onnxruntime")

    def run(name: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        path = str(example_repo / name / "1" / "model.onnx")
        return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)

    def col(*values: int, dtype: type = np.int32) -> np.ndarray:
        return np.array([[v] for v in values], dtype=dtype)

    (out,) = run(
        "simple_sequence", {"INPUT": col(0, 11, 5), "START": col(1, 0, 1), "READY": col(1, 1, 0)}
    )
    assert out.tolist() == [[1], [11], [0]]  # (INPUT + START) * READY, as Triton's
    (out,) = run(
        "simple_dyna_sequence",
        {
            "INPUT": col(100, 1, 1),
            "START": col(1, 0, 0),
            "END": col(0, 1, 1),
            "READY": col(1, 1, 0),
            "CORRID": col(7, 1001, 5, dtype=np.uint64),
        },
    )
    assert out.tolist() == [[101], [1002], [0]]
    # The accumulator: START ignores the state; a padding row (READY 0) keeps it.
    out, state = run(
        "sequence_accumulator",
        {
            "INPUT": col(3, 4, 9),
            "START": col(1, 0, 0),
            "READY": col(1, 1, 0),
            "INPUT_STATE": col(50, 10, 6),
        },
    )
    assert out.tolist() == [[3], [14], [15]] and state.tolist() == [[3], [14], [6]]

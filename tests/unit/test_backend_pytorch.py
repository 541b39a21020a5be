"""The PyTorch backend on the example TorchScript and torch.export models, against torch itself.

The models come from ``examples/make_backend_models.py`` (the same files ``conch up`` serves);
each result is compared with calling the saved model directly in this process, so a wrong
input order, output position or batch split shows up as a numeric mismatch.
"""

from __future__ import annotations

import importlib.util
import threading
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shared.model_config import InstanceGroup, parse_pbtxt  # noqa: E402
from shared.storage.repository import RepositoryModel, read_model  # noqa: E402
from shared.wire.errors import ConchError, ErrorCode  # noqa: E402
from workers.backend import LoadSpec, ModelRequest  # noqa: E402
from workers.loading.warmup import run_warmup  # noqa: E402
from workers.pytorch.backend import (  # noqa: E402
    PyTorchBackend,
    PyTorchInstance,
    input_order,
    output_positions,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_backend_models", EXAMPLES / "make_backend_models.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("torch_repo")
    _script().write_repository(root, ["torchscript_mlp", "export_mlp"])
    return root


def load_spec(model: RepositoryModel, **overrides: object) -> LoadSpec:
    fields: dict[str, object] = {
        "config": model.config,
        "version": 1,
        "version_path": model.version_path(1),
        "model_path": model.path,
        "instance_group": model.config.instance_groups[0],
        "instance_index": 0,
    }
    fields.update(overrides)
    return LoadSpec(**fields)  # type: ignore[arg-type]


def requests_for(model: RepositoryModel, sizes: list[int], seed: int = 0) -> list[ModelRequest]:
    rng = np.random.default_rng(seed)
    return [
        ModelRequest(
            id=f"r{i}",
            inputs={
                t.name: rng.standard_normal((size, *t.dims)).astype(np.float32)
                for t in model.config.inputs
            },
            requested_outputs=model.config.output_names,
        )
        for i, size in enumerate(sizes)
    ]


def test_torchscript_matches_torch_jit(repo: Path) -> None:
    model = read_model(repo / "torchscript_mlp")
    instance = PyTorchBackend().load(load_spec(model))
    requests = requests_for(model, [1, 3, 2])
    execution = instance.execute(requests)  # one concatenated batch of 6 rows, split back
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = torch.jit.load(str(model.version_path(1) / "model.pt"))
    for request, result in zip(requests, execution.results, strict=True):
        assert result.error is None
        logits, probs = reference(torch.from_numpy(request.inputs["INPUT__0"]))
        np.testing.assert_allclose(result.outputs["OUTPUT__0"], logits.detach().numpy(), rtol=1e-5)
        np.testing.assert_allclose(result.outputs["OUTPUT__1"], probs.detach().numpy(), rtol=1e-5)
        assert result.outputs["OUTPUT__0"].dtype == np.float32
    instance.unload()


def test_export_program_matches_torch_export_and_maps_names(repo: Path) -> None:
    model = read_model(repo / "export_mlp")
    # The config lists "scale" before "features"; forward(features, scale) takes them by name.
    assert model.config.input_names == ["scale", "features"]
    instance = PyTorchBackend().load(load_spec(model))
    assert isinstance(instance, PyTorchInstance) and instance.exported
    requests = requests_for(model, [2, 5], seed=1)
    requests[1].requested_outputs = ["norm"]
    execution = instance.execute(requests)
    reference = torch.export.load(str(model.version_path(1) / "model.pt2")).module()
    for request, result in zip(requests, execution.results, strict=True):
        assert result.error is None
        scores, norm = reference(
            torch.from_numpy(request.inputs["features"]), torch.from_numpy(request.inputs["scale"])
        )
        expected = {"scores": scores.detach().numpy(), "norm": norm.detach().numpy()}
        assert sorted(result.outputs) == sorted(request.requested_outputs)
        for name, value in result.outputs.items():
            np.testing.assert_allclose(value, expected[name], rtol=1e-5)


def test_warmup_runs_on_both_models(repo: Path) -> None:
    for name, batches in (("torchscript_mlp", 1), ("export_mlp", 2)):
        model = read_model(repo / name)
        instance = PyTorchBackend().load(load_spec(model))
        assert run_warmup(instance, model.config, model.version_path(1)) == batches


def test_two_instances_run_from_two_threads(repo: Path) -> None:
    """count: 2 gives two independent instances the worker drives from two threads at once."""
    model = read_model(repo / "torchscript_mlp")
    group = InstanceGroup(name="g", kind="KIND_CPU", count=2)
    instances = [
        PyTorchBackend().load(load_spec(model, instance_group=group, instance_index=i))
        for i in range(2)
    ]
    assert instances[0].module is not instances[1].module
    barrier = threading.Barrier(2)
    results: dict[int, list[np.ndarray]] = {}

    def drive(index: int) -> None:
        barrier.wait()
        outputs = []
        for seed in range(20):
            (result,) = instances[index].execute(requests_for(model, [4], seed)).results
            outputs.append(result.outputs["OUTPUT__0"])
        results[index] = outputs

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, b in zip(results[0], results[1], strict=True):  # same seeds: same answers
        np.testing.assert_array_equal(a, b)


def test_config_parameters_inference_mode_and_threads(repo: Path) -> None:
    """Triton's INFERENCE_MODE and INTRA_OP_THREAD_COUNT parameters are honoured."""
    source = read_model(repo / "torchscript_mlp")
    text = (source.path / "config.pbtxt").read_text() + (
        'parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }\n'
        'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }\n'
    )
    model = RepositoryModel("torchscript_mlp", source.path, parse_pbtxt(text), [1])
    before = torch.get_num_threads()
    try:
        instance = PyTorchBackend().load(load_spec(model))
        assert isinstance(instance, PyTorchInstance) and not instance.inference_mode
        assert torch.get_num_threads() == 1
        (result,) = instance.execute(requests_for(model, [2])).results
        assert result.error is None and result.outputs["OUTPUT__0"].shape == (2, 3)
    finally:
        torch.set_num_threads(before)


def test_gpu_instance_without_cuda_fails_clearly(repo: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    model = read_model(repo / "torchscript_mlp")
    group = InstanceGroup(name="g", kind="KIND_GPU", count=1)
    with pytest.raises(ConchError) as caught:
        PyTorchBackend().load(load_spec(model, instance_group=group, device="gpu"))
    assert caught.value.code == ErrorCode.UNAVAILABLE
    assert "no CUDA device" in caught.value.message


def test_missing_model_file_is_not_found(tmp_path: Path) -> None:
    config = parse_pbtxt(
        'name: "m" platform: "pytorch_libtorch" max_batch_size: 0 '
        'input [{name: "INPUT__0" data_type: TYPE_FP32 dims: [1]}] '
        'output [{name: "OUTPUT__0" data_type: TYPE_FP32 dims: [1]}]'
    )
    (tmp_path / "1").mkdir()
    model = RepositoryModel("m", tmp_path, config, [1])
    with pytest.raises(ConchError) as caught:
        PyTorchBackend().load(load_spec(model))
    assert caught.value.code == ErrorCode.NOT_FOUND and "model.pt" in caught.value.message


def test_triton_naming_rules() -> None:
    assert input_order(["INPUT__1", "INPUT__0"], ["a", "b"]) == ["INPUT__0", "INPUT__1"]
    assert input_order(["y", "x"], ["x", "y"]) == ["x", "y"]
    assert input_order(["p", "q"], ["a", "b"]) == ["p", "q"]  # neither rule: config order
    with pytest.raises(ConchError, match="both map to forward"):
        input_order(["INPUT__0", "x"], ["x"])
    assert output_positions(["OUTPUT__1", "OUTPUT__0", "extra"]) == {
        "OUTPUT__1": 1,
        "OUTPUT__0": 0,
        "extra": 2,
    }

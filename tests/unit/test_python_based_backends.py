"""The rules of Python-based backends (``backend: "NAME"`` -> ``<directory>/NAME/model.py``):
where they are looked for, which names are never theirs, Triton's error for a name found nowhere,
and how ``conch up`` and the python worker route their models."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from conch import service_env, up_plan
from conch.arguments import parser
from conch.up_args import UsageError
from conch.up_args import resolve as resolve_args
from shared.model_config import ModelConfig, parse_pbtxt, python_based
from shared.wire.errors import ConchError
from workers.backend_table import BACKENDS
from workers.loading.placement import places_itself
from workers.python.based_backends import BackendDirectories

ROOT = Path(__file__).resolve().parents[2]


def _config(backend: str, extra: str = "", name: str = "m") -> ModelConfig:
    text = f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 4\n{extra}'
    return parse_pbtxt(text, "config.pbtxt")


def _backend(directory: Path, name: str) -> Path:
    path = directory / name / "model.py"
    path.parent.mkdir(parents=True)
    path.write_text("class TritonPythonModel:\n    pass\n")
    return path


def test_directories_are_separated_by_colons_or_commas_and_default_to_tritons() -> None:
    assert python_based.parse_directories("/a:/b,/c") == [Path("/a"), Path("/b"), Path("/c")]
    assert python_based.parse_directories(" /a , ") == [Path("/a")]
    defaults = python_based.parse_directories("")
    assert defaults[0] == Path("/opt/tritonserver/backends")
    # A source checkout's own example backends come second.
    assert defaults[1:] == [ROOT / "examples" / "backends"]
    assert (defaults[1] / "wordcount" / "model.py").is_file()
    assert (defaults[1] / "tiny_llm" / "model.py").is_file()


def test_the_first_directory_with_the_backend_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    mine = _backend(second, "mine")
    assert python_based.find("mine", [first, second]) == mine
    shadow = _backend(first, "mine")
    assert python_based.find("mine", [first, second]) == shadow
    assert python_based.find("other", [first, second]) is None
    for escaping in ("../second/mine", "a/b", "..", "."):
        assert python_based.find(escaping, [first, second]) is None


def test_built_in_backends_and_ensembles_are_never_python_based() -> None:
    for name in BACKENDS:
        assert not python_based.is_candidate(_config(name), BACKENDS)
    ensemble = parse_pbtxt('name: "e"\nplatform: "ensemble"\n', "config.pbtxt")
    assert not python_based.is_candidate(ensemble, BACKENDS)
    assert python_based.is_candidate(_config("vllm"), BACKENDS)


def test_a_backend_found_nowhere_fails_with_tritons_words_and_where_it_looked(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConchError) as raised:
        python_based.resolve(_config("vllm"), [tmp_path / "a", tmp_path / "b"], BACKENDS)
    message = raised.value.message
    assert message.startswith("unable to find backend library for backend 'vllm' of model 'm'")
    assert f"'{tmp_path / 'a' / 'vllm' / 'model.py'}'" in message
    assert f"'{tmp_path / 'b' / 'vllm' / 'model.py'}'" in message
    assert "onnxruntime" in message and "--backend-directory" in message


def test_runtime_model_py_is_accepted_and_a_shared_library_refused(tmp_path: Path) -> None:
    found = _backend(tmp_path, "mine")
    config = _config("mine", 'runtime: "model.py"')
    assert python_based.resolve(config, [tmp_path], BACKENDS) == found
    with pytest.raises(ConchError, match=r"field 'runtime' is 'libtriton_mine\.so'"):
        python_based.resolve(_config("mine", 'runtime: "libtriton_mine.so"'), [tmp_path], BACKENDS)


def test_the_python_worker_takes_python_and_python_based_models(tmp_path: Path) -> None:
    found = _backend(tmp_path, "mine")
    directories = BackendDirectories(str(tmp_path))
    version = tmp_path / "repo" / "m" / "1"
    assert directories.accepts(_config("python"))
    assert directories.model_file(_config("python"), version) == version / "model.py"
    assert directories.accepts(_config("mine"))
    assert directories.model_file(_config("mine"), version) == found
    # Found nowhere: still this worker's, whose load then says where it looked.
    assert directories.accepts(_config("missing"))
    with pytest.raises(ConchError, match="unable to find backend library for backend 'missing'"):
        directories.model_file(_config("missing"), version)
    for name in ("onnxruntime", "pytorch", "tensorflow", "fil", "openvino", "tensorrt"):
        assert not directories.accepts(_config(name))


def test_a_python_based_model_may_place_itself() -> None:
    assert places_itself(_config("vllm"))
    assert places_itself(_config("python"))
    assert not places_itself(_config("onnxruntime"))


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, backend in (("counted", "mine"), ("lost", "nowhere")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(f'backend: "{backend}"\nmax_batch_size: 4\n')
    return repo


def _args(*argv: str) -> argparse.Namespace:
    args = parser().parse_args(["up", *argv])
    resolve_args(args)
    return args


def test_conch_up_sends_python_based_models_to_the_python_worker(tmp_path: Path) -> None:
    backends = tmp_path / "backends"
    _backend(backends, "mine")
    args = _args(f"--model-repository={_repository(tmp_path)}", f"--backend-directory={backends}")
    plan = up_plan.plan_models(args)
    assert [c.name for c in plan.by_backend["python"]] == ["counted"]
    assert set(plan.by_backend) == {"python"}
    assert plan.wait_for == ["counted"]
    assert "unable to find backend library for backend 'nowhere'" in plan.failed["lost"]
    assert str(backends / "nowhere" / "model.py") in plan.failed["lost"]


def test_conch_up_without_the_backend_finds_no_servable_model(tmp_path: Path) -> None:
    args = _args(f"--model-repository={_repository(tmp_path)}", f"--backend-directory={tmp_path}")
    with pytest.raises(UsageError, match=r"no servable model .*unable to find backend"):
        up_plan.plan_models(args)


def test_conch_up_gives_the_workers_absolute_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = _args("--model-repository=repo", "--backend-directory=one:two,/abs")
    env = service_env.worker_env(args)
    expected = f"{tmp_path / 'one'}:{tmp_path / 'two'}:/abs"
    assert env["CONCH_WORKER_BACKEND_DIRECTORY"] == expected
    unset = service_env.worker_env(_args("--model-repository=repo"))
    assert "CONCH_WORKER_BACKEND_DIRECTORY" not in unset  # the worker's defaults

"""The pure parts of the Python backend's pieces (the mesh runs them whole in
tests/e2e/test_python_backend_pieces.py): response parameters' types and their gRPC form, the
packed environment's extraction and version check, pb_utils model control's argument checks and
mode."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from gateway.grpc.codec import encode_grpc_response
from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire.errors import ConchError
from workers.python import bls_control, execution_env

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workers" / "python"))
import triton_python_backend_utils as pb_utils

sys.path.pop(0)

PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def test_response_parameters_are_str_int_or_bool() -> None:
    response = pb_utils.InferenceResponse([], parameters={"a": "x", "b": 2, "c": False})
    assert response.parameters() == '{"a": "x", "b": 2, "c": false}'
    assert pb_utils.InferenceResponse([]).parameters() == "{}"
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str, found type float"):
        pb_utils.InferenceResponse([], parameters={"a": 1.5})
    with pytest.raises(pb_utils.TritonModelException, match="keys to have type str"):
        pb_utils.InferenceResponse([], parameters={1: "a"})


def test_grpc_response_parameters_keep_their_types() -> None:
    response = encode_grpc_response("m", 1, "", [], parameters={"s": "x", "i": 3, "b": True})
    assert response.parameters["s"].string_param == "x"
    assert response.parameters["i"].int64_param == 3
    assert response.parameters["b"].bool_param is True


def _config(value: str) -> ModelConfig:
    return parse_pbtxt(
        'name: "m" backend: "python" '
        f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{value}" }} }}'
    )


def _archive(tmp_path: Path, python_dir: str) -> Path:
    root = tmp_path / f"env-{python_dir}"
    package = root / "lib" / python_dir / "site-packages" / "conch_probe_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to("/usr/bin/python3")  # as a venv has it
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    archive = model / f"{python_dir}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname=".")
    return model


def test_a_packed_environment_is_extracted_once_and_its_site_packages_found(
    tmp_path: Path,
) -> None:
    model = _archive(tmp_path, PY)
    config = _config(f"$$TRITON_MODEL_DIRECTORY/{PY}.tar.gz")
    site = execution_env.site_packages(config, model, tmp_path / "cache")
    assert Path(site, "conch_probe_pkg", "__init__.py").is_file()
    assert not Path(site).parents[2].joinpath("bin", "python").exists()  # a link outside: left
    again = execution_env.site_packages(config, model, tmp_path / "cache")
    assert again == site
    assert execution_env.site_packages(parse_pbtxt('name: "m" backend: "python"'), model) == ""


def test_an_environment_of_another_python_or_none_is_refused(tmp_path: Path) -> None:
    model = _archive(tmp_path, "python3.9")
    config = _config("$$TRITON_MODEL_DIRECTORY/python3.9.tar.gz")
    with pytest.raises(ConchError, match=r"Python 3\.9 but the worker runs Python 3\.\d+"):
        execution_env.site_packages(config, model, tmp_path / "cache")
    with pytest.raises(ConchError, match=r"EXECUTION_ENV_PATH is .*: no file"):
        execution_env.site_packages(_config("/nowhere.tar.gz"), model)


def test_model_control_arguments_and_mode() -> None:
    override, files = bls_control.load_request(
        "m", '{"backend": "python"}', {"file:1/model.py": b"x"}
    )
    assert override == {"name": "m", "backend": "python"} and files == {"1/model.py": b"x"}
    assert bls_control.load_request("m", None, None) == (None, {})
    with pytest.raises(ConchError, match="Invalid config override"):
        bls_control.load_request("m", "[1]", None)
    with pytest.raises(ConchError, match="need a config override"):
        bls_control.load_request("m", None, {"file:1/model.py": b"x"})
    with pytest.raises(ConchError, match="field 'name' is 'other'"):
        bls_control.load_request("m", '{"name": "other"}', None)
    bls_control.check_mode("explicit", "load", "m")
    bls_control.check_mode("on_demand", "load", "m")
    with pytest.raises(ConchError, match="not allowed if polling is enabled"):
        bls_control.check_mode("poll", "load", "m")

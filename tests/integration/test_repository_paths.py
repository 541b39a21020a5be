"""Repository API paths (issue 12, defect 9): a model name is one directory of the repository,
and no file a load touches is outside the model's directory. Refused with 400 naming the field,
before any worker is asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.core.model_table import ModelTable
from gateway.repository.control import RepositoryControl
from shared import model_config
from shared.storage import repository
from shared.storage.model_paths import check_model_name, confined
from shared.wire import keys
from shared.wire.errors import ConchError, ErrorCode


@pytest.fixture
def control_api(aredis: aioredis.Redis) -> RepositoryControl:
    return RepositoryControl(aredis, ModelTable(aredis), timeout_s=1.0)


@pytest.mark.parametrize("name", ["..", ".", "../etc", "a/b", "a\\b", ".hidden", "", "x" * 256])
async def test_a_model_name_that_is_not_one_directory_is_refused(
    control_api: RepositoryControl, aredis: aioredis.Redis, name: str
) -> None:
    """Before: the name was joined to the repository path unchecked (and the request went to
    every worker: 503 when none was live)."""
    for action in (control_api.load, control_api.unload):
        with pytest.raises(ConchError) as raised:
            await action(name, {})
        assert raised.value.code == ErrorCode.INVALID_ARG
        assert "model name" in raised.value.message
    assert await aredis.xlen(keys.control_stream()) == 0  # no worker was asked


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"default_model_filename": "../../../etc/passwd"}, "default_model_filename"),
        ({"default_model_filename": "/etc/passwd"}, "default_model_filename"),
        (
            {
                "model_warmup": [
                    {
                        "name": "w",
                        "batch_size": 1,
                        "inputs": {
                            "INPUT0": {
                                "data_type": "TYPE_FP32",
                                "dims": [2],
                                "input_data_file": "../../secret.bin",
                            }
                        },
                    }
                ]
            },
            "model_warmup[0].inputs.INPUT0.input_data_file",
        ),
    ],
)
async def test_a_config_override_naming_a_file_outside_the_model_is_refused(
    control_api: RepositoryControl, aredis: aioredis.Redis, override: dict, field: str
) -> None:
    config = {"name": "ok", "backend": "onnxruntime", "max_batch_size": 0, **override}
    with pytest.raises(ConchError) as raised:
        await control_api.load("ok", {"config": config})
    assert raised.value.code == ErrorCode.INVALID_ARG
    assert f"parameters.config.{field}" in raised.value.message
    assert await aredis.xlen(keys.control_stream()) == 0


def test_a_configuration_on_disk_naming_a_file_outside_its_model_is_not_loaded(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good"
    (good / "1").mkdir(parents=True)
    (good / "config.pbtxt").write_text('name: "good"\nbackend: "onnxruntime"\n')
    bad = tmp_path / "bad"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text(
        'name: "bad"\nbackend: "onnxruntime"\ndefault_model_filename: "../../good/1/model.onnx"\n'
    )
    scan = repository.scan(tmp_path)
    assert list(scan.models) == ["good"]
    assert "default_model_filename" in scan.errors["bad"]
    override = model_config.from_json(
        {"name": "good", "backend": "onnxruntime", "default_model_filename": "/etc/passwd"}
    )
    with pytest.raises(ConchError):
        repository.read_model(good, override)


def test_names_and_references() -> None:
    for name in ["simple", "add_sub", "resnet-50.v2", "A1", "_private", "-x"]:
        check_model_name(name)
    assert confined("model.onnx") and confined("sub/model.plan")
    for reference in ["", "../x", "a/../../x", "/abs", "a\\b", "nul\x00"]:
        assert not confined(reference)

"""``model_warmup`` -> the batches an instance runs before READY, with Triton's field meanings."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from shared.model_config import ModelConfig, parse_pbtxt
from shared.wire.errors import ConchError, ErrorCode
from workers.backend import Execution, ModelInstance, ModelRequest, ModelResult
from workers.loading.warmup import run_warmup, warmup_batches

HEAD = """
name: "m" backend: "python" max_batch_size: {mbs}
input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 2, 3 ] }},
        {{ name: "S" data_type: TYPE_STRING dims: [ 2 ] }},
        {{ name: "I" data_type: TYPE_INT32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }} ]
"""


def config(warmup: str, mbs: int = 8) -> ModelConfig:
    return parse_pbtxt(HEAD.format(mbs=mbs) + warmup)


def test_zero_random_and_count(tmp_path: Path) -> None:
    cfg = config(
        """model_warmup [ {
          name: "z" batch_size: 3 count: 2
          inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 2, 3 ] zero_data: true } }
          inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] random_data: true } }
          inputs { key: "I" value: { data_type: TYPE_INT32 dims: [ 4 ] random_data: true } }
        } ]"""
    )
    batches = warmup_batches(cfg, tmp_path)
    assert [len(b) for b in batches] == [3, 3]  # count 2 executions of batch_size 3 requests
    request = batches[0][0]
    assert request.requested_outputs == ["Y"] and request.batch_size == 1
    assert request.inputs["A"].shape == (1, 2, 3) and not request.inputs["A"].any()
    assert request.inputs["A"].dtype == np.float32
    assert request.inputs["S"].tolist() == [[b"", b""]]  # random BYTES is zero data, as Triton
    ints = request.inputs["I"]
    assert ints.dtype == np.int32 and ints.shape == (1, 4) and ((ints >= 0) & (ints < 16)).all()
    again = warmup_batches(cfg, tmp_path)[0][0].inputs["I"]
    np.testing.assert_array_equal(again, ints)  # seeded: warmup is reproducible


def test_input_data_files_from_version_warmup_dir(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    values = np.arange(6, dtype="<f4")
    (tmp_path / "warmup" / "a.bin").write_bytes(values.tobytes())
    (tmp_path / "warmup" / "s.bin").write_bytes(
        b"".join(struct.pack("<I", len(s)) + s for s in (b"hi", b"there"))
    )
    cfg = config(
        """model_warmup [ {
          name: "f" batch_size: 1
          inputs { key: "A"
                   value: { data_type: TYPE_FP32 dims: [ 2, 3 ] input_data_file: "a.bin" } }
          inputs { key: "S" value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s.bin" } }
        } ]""",
        mbs=0,
    )
    (batch,) = warmup_batches(cfg, tmp_path)
    (request,) = batch
    np.testing.assert_array_equal(request.inputs["A"], values.reshape(2, 3))  # no batch dim
    assert request.inputs["S"].tolist() == [b"hi", b"there"]


@pytest.mark.parametrize(
    ("warmup", "message"),
    [
        (
            'inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 2, 3 ] '
            'input_data_file: "nope" } }',
            "input_data_file 'nope' not found",
        ),
        (
            'inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 2, 3 ] '
            'input_data_file: "short" } }',
            "'short' has 8 bytes; 'A' (FP32 [1, 2, 3]) needs 24",
        ),
        ('inputs { key: "A" value: { data_type: TYPE_FP32 dims: [ 2, 3 ] } }', "sets none of"),
    ],
)
def test_bad_settings_name_the_problem(tmp_path: Path, warmup: str, message: str) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short").write_bytes(b"\x00" * 8)
    cfg = config(f'model_warmup [ {{ name: "w" batch_size: 1 {warmup} }} ]')
    with pytest.raises(ConchError) as caught:
        warmup_batches(cfg, tmp_path)
    assert caught.value.code == ErrorCode.INVALID_ARG
    assert "model 'm' model_warmup 'w'" in caught.value.message and message in caught.value.message


def test_batch_size_limits(tmp_path: Path) -> None:
    cfg = config('model_warmup [ { name: "w" batch_size: 9 } ]')
    with pytest.raises(ConchError, match="batch_size 9 > max_batch_size 8"):
        warmup_batches(cfg, tmp_path)
    assert warmup_batches(config(""), tmp_path) == []


class Recorder(ModelInstance):
    """Pure logic stand-in: records batches, fails requests whose id matches ``fail``."""

    def __init__(self, fail: str = "") -> None:
        self.batches: list[list[ModelRequest]] = []
        self.fail = fail

    def execute(self, requests: list[ModelRequest]) -> Execution:
        self.batches.append(requests)
        return Execution(
            [
                ModelResult(error=ConchError(ErrorCode.INTERNAL, "boom"))
                if self.fail and self.fail in r.id
                else ModelResult(outputs={"Y": np.zeros((1, 1), np.float32)})
                for r in requests
            ]
        )


def test_run_warmup_executes_every_batch_and_raises_on_failure(tmp_path: Path) -> None:
    cfg = config(
        """model_warmup [ { name: "a" batch_size: 2 count: 3 },
                          { name: "b" batch_size: 1 } ]"""
    )
    recorder = Recorder()
    assert run_warmup(recorder, cfg, tmp_path) == 4
    assert [len(b) for b in recorder.batches] == [2, 2, 2, 1]
    with pytest.raises(ConchError, match="warmup 'warmup-b-0-0' failed: boom"):
        run_warmup(Recorder(fail="-b-"), cfg, tmp_path)

"""Pure rules of the protocol extensions (no Redis, no server): classification's format, the
response cache's eligibility and key, shared memory parameters, header forwarding, load
parameters and model file paths, trace and log settings, ``--cache-config``."""

from __future__ import annotations

import base64
import logging
import re
from typing import Any

import numpy as np
import pytest

from conch import cache_config
from gateway.core.request import RequestedOutput
from gateway.core.validation import ValidRequest
from gateway.extensions import classification, header_forwarding, trace_settings
from gateway.extensions.response_cache import cacheable, request_key
from gateway.extensions.shm_params import shm_ref
from gateway.repository.files import load_request
from gateway.rest.codec import parse_infer_request
from shared.fleet import log_settings
from shared.model_config import from_json
from shared.storage import model_files
from shared.storage.repositories import Repositories
from shared.wire import tensors
from shared.wire.envelope import Tensor
from shared.wire.errors import ConchError, ErrorCode
from workers.loading import control_actions


def tensor(name: str, values: np.ndarray, datatype: str) -> Tensor:
    return Tensor(name, datatype, list(values.shape), values.astype(values.dtype).tobytes())


# --- classification ---------------------------------------------------------------------------


def test_classification_prints_floats_as_triton_does_with_labels() -> None:
    scores = np.array([[0.1, 0.7, 0.2], [0.9, 0.05, 0.05]], dtype=np.float32)
    out = classification.classify(tensor("P", scores, "FP32"), 2, True, ["cat", "dog", "eel"])
    assert out.datatype == "BYTES" and out.shape == [2, 2]
    assert tensors.deserialize_bytes(out.data) == [
        b"0.700000:1:dog",
        b"0.200000:2:eel",
        b"0.900000:0:cat",
        b"0.050000:1:dog",  # a tie keeps index order
    ]


def test_classification_of_integers_without_labels_and_batch() -> None:
    values = np.array([3, 9, -1, 9], dtype=np.int32)
    out = classification.classify(tensor("V", values, "INT32"), 10, False)
    assert out.shape == [4]  # at most as many classes as there are
    assert tensors.deserialize_bytes(out.data) == [b"9:1", b"9:3", b"3:0", b"-1:2"]


def test_classification_refuses_types_triton_refuses() -> None:
    with pytest.raises(ConchError, match="unsupported type 'BYTES'"):
        text = Tensor("S", "BYTES", [1], tensors.serialize_bytes([b"x"]))
        classification.classify(text, 1, False)
    with pytest.raises(ConchError, match="Unable to set 'classification'"):
        classification.requested_count("OUT", {"classification": "three"})


# --- response cache ---------------------------------------------------------------------------


def config(name: str, **extra: Any) -> Any:
    base: dict[str, Any] = {"name": name, "backend": "onnxruntime", "max_batch_size": 8}
    return from_json({**base, **extra})


def ensemble(name: str, steps: list[str], cache: bool = True) -> Any:
    return from_json(
        {
            "name": name,
            "platform": "ensemble",
            "response_cache": {"enable": cache},
            "ensemble_scheduling": {
                "step": [{"model_name": s, "model_version": -1} for s in steps]
            },
        }
    )


def test_only_models_that_enable_it_and_may_cache() -> None:
    plain = config("plain")
    cached = config("cached", response_cache={"enable": True})
    decoupled = config(
        "dec", response_cache={"enable": True}, model_transaction_policy={"decoupled": True}
    )
    configs = {c.name: c for c in (plain, cached, decoupled)}
    assert not cacheable(plain, configs)
    assert cacheable(cached, configs)
    assert not cacheable(decoupled, configs)


def test_a_sequence_model_with_the_cache_on_is_refused_at_load_as_triton_does() -> None:
    with pytest.raises(ConchError, match="Response Cache does not currently support model seq"):
        config("seq", response_cache={"enable": True}, sequence_batching={})


def test_an_ensemble_caches_when_every_composed_model_may() -> None:
    plain, decoupled = config("plain"), config("dec", model_transaction_policy={"decoupled": True})
    inner_ok = ensemble("inner_ok", ["plain"], cache=False)
    inner_bad = ensemble("inner_bad", ["dec"], cache=False)
    configs = {c.name: c for c in (plain, decoupled, inner_ok, inner_bad)}
    assert cacheable(ensemble("top", ["plain", "inner_ok"]), configs)  # composing need not enable
    assert not cacheable(ensemble("top", ["plain", "inner_bad"]), configs)  # at any depth
    assert not cacheable(ensemble("top", ["missing"]), configs)
    assert not cacheable(ensemble("top", ["plain"], cache=False), configs)


def valid(*inputs: Tensor, outputs: tuple[str, ...] = ()) -> ValidRequest:
    return ValidRequest(list(inputs), [RequestedOutput(o, True) for o in outputs], 1, "")


def test_cache_key_covers_what_determines_the_response_only() -> None:
    a = tensor("INPUT0", np.arange(4, dtype=np.int32), "INT32")
    b = tensor("INPUT0", np.arange(1, 5, dtype=np.int32), "INT32")
    key = request_key("m", 1, valid(a), {"temperature": 0.5})
    assert key.startswith("conch:cache:m:1:")
    assert key == request_key("m", 1, valid(a), {"temperature": 0.5})
    assert key == request_key("m", 1, valid(a), {"temperature": 0.5, "priority": 2, "timeout": 9})
    assert key != request_key("m", 2, valid(a), {"temperature": 0.5})
    assert key != request_key("m", 1, valid(b), {"temperature": 0.5})
    assert key != request_key("m", 1, valid(a), {"temperature": 0.6})
    assert key != request_key("m", 1, valid(a, outputs=("OUT",)), {"temperature": 0.5})
    reshaped = Tensor("INPUT0", "INT32", [2, 2], a.data)
    assert key != request_key("m", 1, valid(reshaped), {"temperature": 0.5})


# --- shared memory parameters -----------------------------------------------------------------


def test_shm_parameters_need_region_and_size() -> None:
    ref = shm_ref("input", "I", {"shared_memory_region": "r", "shared_memory_byte_size": 8})
    assert ref is not None and (ref.region, ref.offset, ref.byte_size) == ("r", 0, 8)
    assert shm_ref("input", "I", {"binary_data_size": 4}) is None
    for bad in (
        {"shared_memory_region": "r"},
        {"shared_memory_byte_size": 8},
        {"shared_memory_region": "r", "shared_memory_byte_size": -1},
        {"shared_memory_region": 3, "shared_memory_byte_size": 8},
    ):
        with pytest.raises(ConchError):
            shm_ref("input", "I", bad)


def test_an_http_input_names_one_place_for_its_data() -> None:
    body = (
        b'{"inputs":[{"name":"I","shape":[1],"datatype":"INT32","data":[1],'
        b'"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}]}'
    )
    with pytest.raises(ConchError, match="Input must set only one of the following fields"):
        parse_infer_request(body, None)
    ok = parse_infer_request(body.replace(b'"data":[1],', b""), None)
    assert ok.shm_inputs["I"].region == "r" and ok.inputs[0].data == b""


# --- header forwarding ------------------------------------------------------------------------


def test_headers_forwarded_as_triton_forwards_them() -> None:
    pattern = header_forwarding.compile_pattern("^probe_")
    params: dict[str, Any] = {"probe_keep": "request"}
    headers = [("Probe_Add", "5"), ("probe_keep", "header"), ("other", "x")]
    header_forwarding.forward(pattern, headers, params)
    assert params == {"probe_keep": "request", "Probe_Add": "5"}  # case-insensitive, no override
    strict = header_forwarding.compile_pattern("(?-i)^probe_")
    params = {}
    header_forwarding.forward(strict, headers, params)
    assert params == {"probe_keep": "header"}
    assert header_forwarding.compile_pattern("") is None
    with pytest.raises(ConchError):
        header_forwarding.compile_pattern("(")


# --- repository load parameters and model files -----------------------------------------------


def test_load_parameters_config_files_and_their_errors() -> None:
    found = load_request(
        "m",
        {"config": '{"max_batch_size":"16"}', "file:1/model.onnx": base64.b64encode(b"x").decode()},
        1024,
    )
    assert found.config == {"max_batch_size": "16", "name": "m"}
    assert found.files == {"1/model.onnx": b"x"}
    cases = {
        "failed to load 'm': Invalid config override": {"config": '"parameters": {{"x"}}'},
        "Unrecognized load parameter 'nope'": {"nope": 1},
        "must stay within model directory": {"file:../escape": b"x"},
        "failed to poll from model repository": {"file:" + "A" * 256: b"a"},
        "exceed 4 bytes": {"file:1/a": b"abc", "file:1/b": b"de"},
        "field 'name' is 'other'": {"config": '{"name": "other"}'},
    }
    for text, parameters in cases.items():
        with pytest.raises(ConchError, match=re.escape(text)):
            load_request("m", parameters, 4)


def test_model_files_stay_in_the_model_directory(tmp_path: Any) -> None:
    model_dir = tmp_path / "m"
    written = model_files.write("m", model_dir, {"1/model.onnx": b"onnx", "labels.txt": b"a\n"})
    assert (model_dir / "1" / "model.onnx").read_bytes() == b"onnx" and len(written) == 2
    (tmp_path / "outside").mkdir()
    (model_dir / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ConchError, match="must stay within model directory"):
        model_files.write("m", model_dir, {"link/evil": b"x"})
    assert not (tmp_path / "outside" / "evil").exists()
    for bad in ("/etc/passwd", "../x", "a/../../x", ""):
        with pytest.raises(ConchError):
            model_files.normalized("m", "file:" + bad)


def test_an_upload_directory_made_by_a_neighbour_worker_is_not_a_duplicate(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of one host share the repository: the first to write an upload creates the
    model's directory, possibly while another looks for it. One look decides."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    repositories = Repositories([str(first), str(second)])
    looked_at = type(first).is_dir

    def neighbour_writes_after_the_look(path: Any) -> bool:
        found = looked_at(path)
        if path == first / "uploaded" and not found:
            path.mkdir()
        return found

    monkeypatch.setattr(type(first), "is_dir", neighbour_writes_after_the_look)
    assert control_actions._model_dir(repositories, "uploaded", True) == first / "uploaded"
    assert control_actions._model_dir(repositories, "uploaded", True) == first / "uploaded"
    (second / "uploaded").mkdir()
    with pytest.raises(ConchError, match="not unique across all model repositories"):
        control_actions._model_dir(repositories, "uploaded", True)


# --- trace and log settings -------------------------------------------------------------------


def test_trace_settings_validated_with_tritons_texts() -> None:
    assert trace_settings.validated({"trace_level": ["TENSORS", "TIMESTAMPS"]}) == {
        "trace_level": ["TIMESTAMPS", "TENSORS"]
    }
    assert trace_settings.validated({"trace_rate": "10", "trace_count": None}) == {
        "trace_rate": "10",
        "trace_count": None,
    }
    with pytest.raises(ConchError, match="Expect only one trace level 'OFF'"):
        trace_settings.validated({"trace_level": ["OFF", "TENSORS"]})
    with pytest.raises(ConchError, match="Unable to parse 'trace_count'"):
        trace_settings.validated({"trace_count": "-2"})
    with pytest.raises(ConchError) as caught:
        trace_settings.validated({"trace_file": "/tmp/t"})
    assert caught.value.code == ErrorCode.UNSUPPORTED


def test_log_settings_map_onto_levels() -> None:
    default = log_settings.from_level(logging.INFO)
    assert log_settings.level_of(default) == logging.INFO
    verbose = log_settings.updated(default, {"log_verbose_level": 1, "log_info": None})
    assert log_settings.level_of(verbose) == logging.DEBUG and verbose.log_info
    quiet = log_settings.updated(default, {"log_info": False, "log_warning": False})
    assert log_settings.level_of(quiet) == logging.ERROR
    with pytest.raises(ConchError, match="log file location can not be updated"):
        log_settings.updated(default, {"log_file": "/tmp/x"})
    with pytest.raises(ConchError, match="invalid argument for --log_format"):
        log_settings.updated(default, {"log_format": "xml"})


# --- conch up --cache-config ------------------------------------------------------------------


def test_cache_config_as_triton_writes_it() -> None:
    assert cache_config.parse([]) is None
    local = cache_config.parse(["local,size=512M"])
    assert local is not None and local.kind == "local" and local.size_bytes == 512 * 1024**2
    remote = cache_config.parse(["redis,host=cache.internal", "redis,port=6380,password=s/p"])
    assert remote is not None and remote.url == "redis://:s%2Fp@cache.internal:6380/0"
    for bad in (["memcached,size=1"], ["local"], ["local,size=10"], ["redis,port=x"]):
        with pytest.raises(ValueError):
            cache_config.parse(bad)

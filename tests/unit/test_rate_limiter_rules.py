"""The rate limiter's pure rules (the copies made available, scopes, what an instance needs, the
load-time refusals), KIND_MODEL's placement and the refusal of ``is_shape_tensor``."""

from __future__ import annotations

from pathlib import Path

import pytest

from conch import service_env
from conch.arguments import parser
from conch.up_args import resolve
from shared.model_config import parse_pbtxt
from shared.model_config.rate_limiter import rate_limiter
from shared.wire import keys
from shared.wire.errors import ConchError
from workers.backend import LoadSpec
from workers.loading.placement import Devices, placements
from workers.python.backend import initialize_args
from workers.ratelimit.resources import (
    Available,
    available_count,
    instance_needs,
    parse_available,
)
from workers.settings import WorkerSettings

SOURCE = "models/m/config.pbtxt"


def _config(groups: str, backend: str = "python", io: str = "") -> str:
    return f'name: "m"\nbackend: "{backend}"\nmax_batch_size: 0\n{io}instance_group [ {groups} ]\n'


LIMITED = (
    '{ name: "g" kind: KIND_CPU count: 2 rate_limiter { resources [ '
    '{ name: "R1" count: 2 }, { name: "R2" count: 1 global: true } ] priority: 3 } }'
)


def test_the_rate_limiter_of_a_group_is_typed() -> None:
    config = parse_pbtxt(_config(LIMITED), SOURCE)
    limiter = rate_limiter(config, "g")
    assert [(r.name, r.count, r.global_) for r in limiter.resources] == [
        ("R1", 2, False),
        ("R2", 1, True),
    ]
    assert limiter.priority == 3
    assert rate_limiter(config, "other").resources == ()


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ('{ name: "" count: 1 }', "without a name"),
        ('{ name: "R" count: 1 }, { name: "R" count: 2 }', "names 'R' twice"),
    ],
)
def test_a_broken_rate_limiter_is_refused_naming_the_field(resources: str, expected: str) -> None:
    group = f'{{ name: "g" kind: KIND_CPU count: 1 rate_limiter {{ resources [ {resources} ] }} }}'
    with pytest.raises(ConchError) as refused:
        parse_pbtxt(_config(group), SOURCE)
    assert "field 'instance_group.rate_limiter.resources'" in refused.value.message
    assert expected in refused.value.message


def test_one_resource_is_global_or_per_device_not_both() -> None:
    groups = (
        '{ name: "a" kind: KIND_CPU count: 1 rate_limiter { resources [ '
        '{ name: "R" count: 1 } ] } },'
        '{ name: "b" kind: KIND_CPU count: 1 rate_limiter { resources [ '
        '{ name: "R" count: 1 global: true } ] } }'
    )
    with pytest.raises(ConchError, match="global in one group and per-device in another"):
        parse_pbtxt(_config(groups), SOURCE)


def test_the_copies_made_available_parse_as_triton_writes_them() -> None:
    available = parse_available(["R1:10", "R2:5:0", "R2:8:1", "R3:2"])
    assert available == (
        Available("R1", 10),
        Available("R2", 5, 0),
        Available("R2", 8, 1),
        Available("R3", 2),
    )
    # Triton's example: device 0 has R1 10, R2 5; device 1 R1 10, R2 8; R3 2 globally.
    assert available_count(available, "R2", 0, False) == 5
    assert available_count(available, "R2", 1, False) == 8
    assert available_count(available, "R1", 1, False) == 10
    assert available_count(available, "R3", None, True) == 2
    assert available_count(available, "R2", None, False) == 0  # the CPU: the default
    assert available_count(available, "R4", 0, False) == 0
    for bad in ("R1", "R1:x", "R1:1:2:3", ":4", "R1:-1"):
        with pytest.raises(ConchError, match="expected <name>:<count>"):
            parse_available([bad])


def test_an_instance_needs_its_resources_in_their_scopes() -> None:
    config = parse_pbtxt(_config(LIMITED), SOURCE)
    needs = instance_needs(config, "g", 1, "hostA", parse_available(["R1:4:1"]))
    assert needs is not None
    assert needs.keys == (
        keys.rate_resource("R1", "hostA/gpu1"),
        keys.rate_resource("R2", "global"),
    )
    assert needs.counts == ((2, 4), (1, 0))
    assert needs.stride == 3
    on_cpu = instance_needs(config, "g", None, "hostA", ())
    assert on_cpu is not None and on_cpu.keys[0] == keys.rate_resource("R1", "hostA/cpu")
    plain = parse_pbtxt(_config('{ name: "p" kind: KIND_CPU count: 1 }'), SOURCE)
    assert instance_needs(plain, "p", None, "hostA", ()) is None


def test_an_instance_needing_more_than_is_available_fails_its_load() -> None:
    config = parse_pbtxt(_config(LIMITED), SOURCE)
    enough = Devices(rate_limit=True, available=parse_available(["R1:2", "R2:1"]))
    assert len(placements(config, enough, 0)) == 2
    short = Devices(rate_limit=True, available=parse_available(["R1:1"]))
    with pytest.raises(ConchError) as refused:
        placements(config, short, 0)
    assert "field 'instance_group.rate_limiter.resources'" in refused.value.message
    assert "asks for 2 of 'R1'" in refused.value.message
    assert len(placements(config, Devices(available=parse_available(["R1:1"])), 0)) == 2  # off


def test_a_sequence_model_with_a_rate_limiter_is_refused_while_limiting() -> None:
    """Sequence instances run the sequence batcher's slots, which take no resources: the field
    would load and change nothing, so it is refused by name (only while limiting is on)."""
    text = _config(LIMITED).replace(
        "max_batch_size: 0\n", "max_batch_size: 0\nsequence_batching {}\n"
    )
    config = parse_pbtxt(text, SOURCE)
    limiting = Devices(rate_limit=True, available=parse_available(["R1:2", "R2:1"]))
    with pytest.raises(ConchError) as refused:
        placements(config, limiting, 0)
    assert "field 'instance_group.rate_limiter'" in refused.value.message
    assert len(placements(config, Devices(), 0)) == 2  # Triton ignores it with --rate-limit=off


def test_kind_model_is_placed_without_a_device_for_the_python_backend() -> None:
    group = '{ name: "own" kind: KIND_MODEL count: 2 }'
    found = placements(parse_pbtxt(_config(group), SOURCE), Devices(), visible=2)
    assert [(p.device, p.device_id, p.gpu) for p in found] == [("model", 0, None)] * 2


def test_kind_model_fails_the_load_of_a_backend_that_cannot_honour_it() -> None:
    group = '{ name: "own" kind: KIND_MODEL count: 1 }'
    config = parse_pbtxt(_config(group, backend="onnxruntime"), SOURCE)
    with pytest.raises(ConchError) as refused:
        placements(config, Devices(), visible=0)
    assert "field 'instance_group.kind'" in refused.value.message
    assert "KIND_MODEL" in refused.value.message


def test_the_python_model_reads_model_as_its_instance_kind() -> None:
    config = parse_pbtxt(_config('{ name: "own" kind: KIND_MODEL count: 1 }'), SOURCE)
    (placement,) = placements(config, Devices(), visible=0)
    spec = LoadSpec(config, 1, Path("m/1"), Path("m"), placement.group, 0, placement.device)
    assert initialize_args(spec)["model_instance_kind"] == "MODEL"


def test_a_shape_tensor_is_refused_naming_the_field() -> None:
    io = (
        'input [ { name: "SHAPE" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
    )
    text = _config('{ name: "g" kind: KIND_GPU count: 1 }', backend="tensorrt", io=io)
    with pytest.raises(ConchError) as refused:
        parse_pbtxt(text, SOURCE)
    assert "field 'input.is_shape_tensor' of 'SHAPE'" in refused.value.message


def test_the_rate_limit_settings_are_checked() -> None:
    settings = WorkerSettings(rate_limit="EXECUTION_COUNT", rate_limit_resources=["R:2:0"])
    assert settings.rate_limit == "execution_count"
    assert Devices.of(settings).available == (Available("R", 2, 0),)
    with pytest.raises(ValueError, match="CONCH_WORKER_RATE_LIMIT is 'sometimes'"):
        WorkerSettings(rate_limit="sometimes")
    with pytest.raises(ValueError, match="expected <name>:<count>"):
        WorkerSettings(rate_limit_resources=["R"])


def test_conch_up_hands_tritons_rate_limit_flags_to_every_worker() -> None:
    argv = ["up", "--model-repository=/models", "--rate-limit=EXECUTION_COUNT"]
    argv += ["--rate-limit-resource=R1:10", "--rate-limit-resource", "R2:5:0"]
    args = parser().parse_args(argv)
    resolve(args)
    env = service_env.worker_env(args)
    assert env["CONCH_WORKER_RATE_LIMIT"] == "execution_count"
    assert env["CONCH_WORKER_RATE_LIMIT_RESOURCES"] == "R1:10,R2:5:0"
    default = service_env.worker_env(parser().parse_args(["up", "--model-repository=/m"]))
    assert default["CONCH_WORKER_RATE_LIMIT"] == "off"

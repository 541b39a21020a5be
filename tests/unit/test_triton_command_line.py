"""`conch up` takes Triton's command-line syntax (issue 27): a Triton start-up line carries over.

Triton's forms (``--opt=VALUE``, ``--opt VALUE``; booleans as Triton's ``ParseOption<bool>`` reads
them), Triton's rules between options, and every Triton option either implemented or refused by
name with the reason, from one table (``conch.triton_options``) that the doc lists in full.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from conch import service_env, triton_options, up_plan
from conch.arguments import parser
from conch.cli import main
from conch.up_args import UsageError, resolve

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "coming-from-triton.md"


def parsed(*argv: str) -> argparse.Namespace:
    return parser().parse_args(["up", "--model-repository=/models", *argv])


def resolved(*argv: str) -> argparse.Namespace:
    args = parsed(*argv)
    resolve(args)
    return args


BOOLEANS = [
    ("--allow-anonymous", "allow_anonymous"),
    ("--allow-client-shm", "allow_client_shm"),
    ("--strict-model-config", "strict_model_config"),
    ("--grpc-keepalive-permit-without-calls", "grpc_keepalive_permit_without_calls"),
    ("--strict-readiness", "strict_readiness"),
    ("--exit-on-error", "exit_on_error"),
    ("--allow-grpc", "allow_grpc"),
]


@pytest.mark.parametrize(("flag", "dest"), BOOLEANS)
@pytest.mark.parametrize(
    ("form", "expected"),
    [
        (["{f}"], True),
        (["{f}=true"], True),
        (["{f}=TRUE"], True),
        (["{f}=1"], True),
        (["{f}=on"], True),
        (["{f}=false"], False),
        (["{f}=False"], False),
        (["{f}=0"], False),
        (["{f}=off"], False),
        (["{f}", "true"], True),
        (["{f}", "false"], False),
        (["{f}", "0"], False),
    ],
)
def test_every_boolean_takes_tritons_forms(
    flag: str, dest: str, form: list[str], expected: bool
) -> None:
    args = parsed(*(part.format(f=flag) for part in form))
    assert getattr(args, dest) is expected


@pytest.mark.parametrize(
    "flag",
    [
        "--allow-anonymous",
        "--allow-client-shm",
        "--strict-model-config",
        "--grpc-keepalive-permit-without-calls",
    ],
)
def test_the_no_spelling_still_turns_a_flag_off(flag: str) -> None:
    dest = flag[2:].replace("-", "_")
    assert getattr(parsed(flag, "--no-" + flag[2:]), dest) is False


def test_a_boolean_refuses_what_triton_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parsed("--exit-on-error=maybe")
    assert exit_info.value.code == 2
    assert "expected true|false|1|0|on|off, got 'maybe'" in capsys.readouterr().err


def test_model_repository_repeats_with_its_alias_and_keeps_order() -> None:
    args = resolved("--model-store", "s3://bucket/models", "--model-repository", "/models")
    assert args.model_repository == ["/models", "s3://bucket/models"]


def test_the_repositories_reach_every_worker_comma_separated(tmp_path: Path) -> None:
    args = resolved(
        "--model-repository",
        str(tmp_path),
        "--model-repository=s3://host:9000/bucket/prefix",
        "--model-control-mode=EXPLICIT",
        "--load-model=a",
        "--load-model",
        "b",
        "--model-config-name=h100",
        "--repository-poll-secs=5",
        "--exit-timeout-secs",
        "12",
        "--disable-auto-complete-config",
    )
    env = service_env.worker_env(args)
    assert env["CONCH_WORKER_MODEL_REPOSITORY"] == (
        f"/models,{tmp_path.resolve()},s3://host:9000/bucket/prefix"
    )
    assert env["CONCH_WORKER_MODEL_CONTROL_MODE"] == "explicit"
    assert env["CONCH_WORKER_LOAD_MODELS"] == "a,b"
    assert env["CONCH_WORKER_MODEL_CONFIG_NAME"] == "h100"
    assert env["CONCH_WORKER_REPOSITORY_POLL_SECS"] == "5.0"
    assert env["CONCH_WORKER_DRAIN_TIMEOUT_S"] == "12.0"
    assert env["CONCH_WORKER_STRICT_MODEL_CONFIG"] == "true"
    gateway = service_env.gateway_env(args, "token", "")
    assert gateway["CONCH_GATEWAY_MODEL_CONTROL_MODE"] == "explicit"
    assert gateway["CONCH_GATEWAY_EXIT_TIMEOUT_S"] == "12.0"


def test_load_model_star_must_be_the_only_one() -> None:
    assert resolved("--model-control-mode=explicit", "--load-model=*").load_model == ["*"]
    with pytest.raises(UsageError, match=r"--load-model=\* must be the only --load-model"):
        resolved("--model-control-mode=explicit", "--load-model=*", "--load-model=simple")


def test_load_model_outside_explicit_mode_is_said_not_dropped_in_silence() -> None:
    args = parsed("--load-model=simple")
    notes = resolve(args)
    assert notes and "--model-control-mode=explicit" in notes[0]


REFUSED = [o for o in triton_options.OPTIONS if o.status == triton_options.REFUSED]


@pytest.mark.parametrize("option", REFUSED, ids=lambda o: o.name)
@pytest.mark.parametrize("form", ["--{n}=1", "--{n} 1", "--{n}"])
def test_every_option_conch_does_not_implement_is_refused_by_name_with_the_reason(
    option: triton_options.TritonOption, form: str
) -> None:
    with pytest.raises(UsageError) as refused:
        resolved(*form.format(n=option.name).split())
    assert str(refused.value) == f"--{option.name} is not supported: {option.conch}"


ONLY = [o for o in triton_options.OPTIONS if o.status == triton_options.ONLY]


@pytest.mark.parametrize("option", ONLY, ids=lambda o: o.name)
def test_an_option_conch_takes_with_one_value_refuses_the_others(
    option: triton_options.TritonOption,
) -> None:
    resolved(f"--{option.name}={option.only.upper()}")
    other = {"true": "false", "false": "true", "0": "3", "off": "execution_count"}[option.only]
    with pytest.raises(UsageError) as refused:
        resolved(f"--{option.name}", other)
    assert str(refused.value).startswith(f"--{option.name}={other} is not supported: ")
    assert option.conch in str(refused.value)


def test_a_bare_boolean_is_true_and_a_bare_value_is_missing() -> None:
    resolved("--allow-http")
    with pytest.raises(UsageError, match="--allow-cpu-metrics=true is not supported"):
        resolved("--allow-cpu-metrics")
    with pytest.raises(UsageError, match="--model-load-retry-count needs a value; Conch takes"):
        resolved("--model-load-retry-count")


def test_conch_up_refuses_in_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["up", "--model-repository=/models", "--repoagent-directory=/opt/tritonserver/ra"])
    assert exit_info.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()
    reason = triton_options.BY_NAME["repoagent-directory"].conch
    assert said == [f"conch up: --repoagent-directory is not supported: {reason}"]


def test_a_name_neither_conch_nor_triton_has_keeps_argparses_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parsed("--backend-directry=/opt")
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --backend-directry=/opt" in capsys.readouterr().err


def test_a_start_up_line_from_tritons_docs_parses_unchanged() -> None:
    line = (
        "--model-repository=/models --model-control-mode=explicit --load-model=simple "
        "--strict-model-config=false --exit-on-error=false --grpc-use-ssl=false "
        "--repository-poll-secs=5 --log-verbose=1 --allow-metrics=true --allow-gpu-metrics true "
        "--http-port=8000 --grpc-port=8001 --metrics-port=8002"
    )
    with pytest.raises(UsageError, match="--metrics-port is not supported"):
        resolved(*line.split())
    args = resolved(*line.replace(" --metrics-port=8002", "").split())
    assert args.model_repository == ["/models"]
    assert (args.model_control_mode, args.load_model) == ("explicit", ["simple"])
    assert args.strict_model_config is False and args.exit_on_error is False
    assert args.grpc_use_ssl is False and args.repository_poll_secs == 5
    assert args.log_level == "DEBUG" and (args.http_port, args.grpc_port) == (8000, 8001)


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        ([], "INFO"),
        (["--log-level=warning"], "WARNING"),
        (["--log-verbose=0"], "INFO"),
        (["--log-verbose=true"], "DEBUG"),
        (["--log-verbose", "2"], "DEBUG"),
        (["--log-info=false"], "WARNING"),
        (["--log-info=false", "--log-warning=false"], "ERROR"),
        (["--log-info=0", "--log-warning=0", "--log-error=0"], "CRITICAL"),
        (["--log-info=true", "--log-error=true"], "INFO"),
    ],
)
def test_tritons_log_severities_become_one_level(argv: list[str], level: str) -> None:
    assert resolved(*argv).log_level == level


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-warning=false"],  # warnings off while info stays on: not a threshold
        ["--log-verbose=1", "--log-info=false"],
        ["--log-level=DEBUG", "--log-verbose=1"],
    ],
)
def test_log_settings_a_threshold_cannot_hold_are_refused(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        resolved(*argv)


@pytest.mark.parametrize(("triton", "conch"), [("default", "text"), ("ISO8601", "text")])
def test_tritons_log_formats_are_text_lines(triton: str, conch: str) -> None:
    assert resolved(f"--log-format={triton}").log_format == conch
    assert resolved("--log-format", "json").log_format == "json"


def test_tritons_addresses_become_the_gateways_bind_address() -> None:
    assert resolved().host == "127.0.0.1"
    assert resolved("--http-address=0.0.0.0").host == "0.0.0.0"
    assert resolved("--http-address=0.0.0.0", "--grpc-address", "0.0.0.0").host == "0.0.0.0"
    with pytest.raises(UsageError, match="one gateway binds HTTP and gRPC on one address"):
        resolved("--http-address=0.0.0.0", "--grpc-address=127.0.0.1")


def test_allow_grpc_false_means_no_grpc_port() -> None:
    assert resolved("--grpc-port=9001", "--allow-grpc=false").grpc_port == 0
    assert resolved("--grpc-port=9001", "--allow-grpc").grpc_port == 9001


def test_id_is_the_server_name() -> None:
    assert resolved("--id=triton").server_name == "triton"


def test_disable_auto_complete_config_wins_over_strict_model_config_false() -> None:
    args = resolved("--strict-model-config=false", "--disable-auto-complete-config")
    assert args.strict_model_config is True


def test_response_cache_byte_size_is_a_local_cache_and_not_both() -> None:
    assert resolved("--response-cache-byte-size=1048576").cache_config == ["local,size=1048576"]
    with pytest.raises(UsageError, match="give one"):
        resolved("--response-cache-byte-size=1048576", "--cache-config=local,size=1M")


def test_tls_flags_need_their_files_and_mutual_implies_tls(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--grpc-use-ssl needs --grpc-server-cert"):
        resolved("--grpc-use-ssl=true")
    cert, key, ca = (tmp_path / name for name in ("cert.pem", "key.pem", "ca.pem"))
    for path in (cert, key, ca):
        path.write_text("-")
    with pytest.raises(UsageError, match="needs --grpc-root-cert"):
        resolved("--grpc-use-ssl-mutual", f"--grpc-server-cert={cert}", f"--grpc-server-key={key}")
    args = resolved(
        "--grpc-use-ssl-mutual=1",
        f"--grpc-server-cert={cert}",
        f"--grpc-server-key={key}",
        f"--grpc-root-cert={ca}",
    )
    env = service_env.gateway_tls_env(args)
    assert env["CONCH_GATEWAY_GRPC_USE_SSL"] == "true"
    assert env["CONCH_GATEWAY_GRPC_USE_SSL_MUTUAL"] == "true"
    assert env["CONCH_GATEWAY_GRPC_ROOT_CERT"] == str(ca)
    assert env["CONCH_GATEWAY_HTTP_USE_SSL"] == "false"
    with pytest.raises(UsageError, match="need --with-envoy"):
        resolved(f"--envoy-server-cert={cert}", f"--envoy-server-key={key}")
    edge = resolved("--with-envoy", f"--envoy-server-cert={cert}", f"--envoy-server-key={key}")
    assert (edge.envoy_server_cert, edge.envoy_server_key) == (str(cert), str(key))


def test_restricted_specs_repeat_and_reach_the_gateway_joined() -> None:
    args = resolved(
        "--http-restricted-api=model-repository,shared-memory:admin-key=s3cret",
        "--http-restricted-api",
        "trace:k=v",
        "--grpc-restricted-protocol=health:k=v",
        "--grpc-infer-response-compression-level=HIGH",
    )
    env = service_env.gateway_edge_env(args)
    assert env["CONCH_GATEWAY_HTTP_RESTRICTED_API"] == (
        "model-repository,shared-memory:admin-key=s3cret;trace:k=v"
    )
    assert env["CONCH_GATEWAY_GRPC_RESTRICTED_PROTOCOL"] == "health:k=v"
    assert env["CONCH_GATEWAY_GRPC_INFER_RESPONSE_COMPRESSION_LEVEL"] == "high"
    with pytest.raises(UsageError, match="expected CATEGORY"):
        resolved("--http-restricted-api=inference")


def _up_options() -> set[str]:
    """Every option string `conch up` knows."""
    known: set[str] = set()
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            known |= set(action.choices["up"]._option_string_actions)
    return known


def test_every_triton_option_is_an_option_of_conch_up() -> None:
    known = _up_options()
    missing = [o.name for o in triton_options.OPTIONS if f"--{o.name}" not in known]
    assert not missing, missing


CONTRACT_FLAGS = (
    *("--model-repository", "--model-store", "--model-control-mode", "--repository-poll-secs"),
    *("--load-model", "--model-config-name", "--exit-timeout-secs"),
    *("--http-use-ssl", "--http-server-cert", "--http-server-key", "--http-root-cert"),
    *("--http-use-ssl-mutual", "--grpc-use-ssl", "--grpc-server-cert", "--grpc-server-key"),
    *("--grpc-root-cert", "--grpc-use-ssl-mutual", "--http-restricted-api"),
    *("--grpc-restricted-protocol", "--grpc-infer-response-compression-level"),
    *("--envoy-server-cert", "--envoy-server-key", "--envoy-root-cert", "--envoy-use-ssl-mutual"),
)


def test_the_contracts_flags_are_options_of_conch_up() -> None:
    known = _up_options()
    assert not [flag for flag in CONTRACT_FLAGS if flag not in known]


def test_the_doc_lists_every_triton_option_as_the_table_says() -> None:
    text = DOC.read_text()
    for option in triton_options.OPTIONS:
        assert re.search(rf"`--{re.escape(option.name)}`", text), option.name
    assert triton_options.markdown_table() in text, (
        "docs/coming-from-triton.md's table is stale: paste the output of "
        "`.venv/bin/python -c 'from conch.triton_options import markdown_table as t; "
        'print(t(), end="")\'` over it'
    )
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    assert "coming-from-triton.md" in deployment
    assert "coming-from-triton.md" in (ROOT / "README.md").read_text()


def test_the_table_names_each_option_once_with_a_reason() -> None:
    names = [o.name for o in triton_options.OPTIONS]
    assert len(names) == len(set(names))
    assert all(o.conch for o in triton_options.OPTIONS)
    assert all(o.only for o in triton_options.OPTIONS if o.status == triton_options.ONLY)


@pytest.fixture
def two_repositories(model_repository: Path, tmp_path: Path) -> tuple[Path, Path]:
    """`simple` and `mlp` in one repository, `mlp` again and an unreadable `bad` in another."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for name in ("simple", "mlp"):
        (first / name).symlink_to(model_repository / name)
    (second / "mlp").symlink_to(model_repository / "mlp")
    (second / "bad" / "1").mkdir(parents=True)
    (second / "bad" / "config.pbtxt").write_text("this is not a configuration {")
    return first, second


def _plan(repos: tuple[Path, Path], *argv: str) -> up_plan.ModelPlan:
    args = parser().parse_args(
        ["up", f"--model-repository={repos[0]}", "--model-repository", str(repos[1]), *argv]
    )
    resolve(args)
    return up_plan.plan_models(args)


def test_none_mode_waits_for_every_model_and_says_which_failed(
    two_repositories: tuple[Path, Path],
) -> None:
    plan = _plan(two_repositories)
    assert plan.wait_for == ["simple"]
    assert set(plan.failed) == {"mlp", "bad"}
    assert "not unique across all model repositories" in plan.failed["mlp"]
    assert set(plan.by_backend) == {"onnxruntime"}


def test_explicit_mode_waits_for_the_load_model_models_only(
    two_repositories: tuple[Path, Path],
) -> None:
    explicit = "--model-control-mode=explicit"
    assert _plan(two_repositories, explicit).wait_for == []
    assert _plan(two_repositories, explicit).failed == {}
    assert _plan(two_repositories, explicit, "--load-model=simple").wait_for == ["simple"]
    star = _plan(two_repositories, explicit, "--load-model=*")
    assert star.wait_for == ["simple"] and set(star.failed) == {"mlp", "bad"}
    assert set(_plan(two_repositories, explicit, "--load-model=bad").failed) == {"bad"}
    with pytest.raises(UsageError, match="--load-model nowhere: no such model"):
        _plan(two_repositories, explicit, "--load-model=nowhere")
    kept = _plan(two_repositories, explicit, "--load-model=nowhere", "--exit-on-error=false")
    assert kept.wait_for == []

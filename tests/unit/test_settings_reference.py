"""docs/settings.md is what scripts/settings_reference.py makes of the settings classes now.

A setting added without a comment above it, or a reference not regenerated after a settings
change, fails here, so the reference cannot drift from the code the way the README's hand-kept
table did. The discovery is tested on a synthetic package too: a new settings class in a new
module (not one of today's paths) must be found and its undocumented field reported.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    """scripts/ is not a package: load the generator from its file."""
    spec = importlib.util.spec_from_file_location(
        "settings_reference", ROOT / "scripts" / "settings_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


reference = _load()


def test_docs_settings_md_is_current() -> None:
    expected = reference.generate()
    current = reference.OUTPUT.read_text() if reference.OUTPUT.exists() else ""
    assert current == expected, f"docs/settings.md is stale: run `{reference.REGENERATE}`"


def test_every_field_has_a_description() -> None:
    classes = reference.settings_classes()
    try:
        found = reference.sections(classes, {})
    except reference.MissingDescriptions as exc:
        pytest.fail(f"{exc}: add a comment line above each in its settings class")
    assert all(row.description for section in found for row in section.fields)


def test_every_service_is_discovered() -> None:
    """The services' classes are found by walking the packages, wherever their modules are."""
    names = {cls.__name__ for cls in reference.settings_classes()}
    assert {
        "Settings",
        "GatewaySettings",
        "SchedulerSettings",
        "WorkerSettings",
        "ControlPlaneSettings",
    } <= names


def test_flags_are_found_from_the_cli_code() -> None:
    """The flag column comes from conch's own code: a flag passed on, directly or through a
    local name or another function's parameter, is found without a hand-kept map."""
    flags = reference.env_flags()
    assert flags["CONCH_GATEWAY_MAX_IN_FLIGHT"] == ("conch up --max-in-flight",)
    assert flags["CONCH_WORKER_STRICT_MODEL_CONFIG"] == ("conch up --strict-model-config",)
    assert flags["CONCH_GATEWAY_GRPC_KEEPALIVE_TIME_MS"] == ("conch up --grpc-keepalive-time",)
    assert flags["CONCH_CONTROLPLANE_LISTENER_PORT"] == ("conch up --envoy-port",)
    assert flags["CONCH_CONTROLPLANE_XDS_PORT"] == ()  # a free port, not the Envoy port


def test_flag_data_flow_follows_names_and_calls() -> None:
    import ast

    source = textwrap.dedent(
        """
        def up(args):
            level = args.log_level.upper()
            spawn(level, port=args.port)
            return {"CONCH_DIRECT": str(args.direct), "CONCH_NONE": "x"}

        def spawn(level, port):
            env = {}
            env["CONCH_LEVEL"] = level
            ports = {"own": free(), "given": port}
            env["CONCH_OWN_PORT"] = str(ports["own"])
            env["CONCH_GIVEN_PORT"] = str(ports["given"])
        """
    )
    dests = reference.env_flag_dests([ast.parse(source)])
    assert dests == {
        "CONCH_DIRECT": {"direct"},
        "CONCH_NONE": set(),
        "CONCH_LEVEL": {"log_level"},
        "CONCH_OWN_PORT": set(),
        "CONCH_GIVEN_PORT": {"port"},
    }


def test_a_new_settings_class_with_an_undocumented_field_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class in a package and module that exist nowhere today, one level below another
    subclass, is found by the walk; its field without a comment is reported by name."""
    base = reference.base_class()
    package = tmp_path / "synthetic_service"
    (package / "deep").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "deep" / "__init__.py").write_text("")
    (package / "deep" / "config.py").write_text(
        textwrap.dedent(
            f"""
            from {base.__module__} import {base.__name__}


            class SyntheticSettings({base.__name__}, kw_only=True):
                __prefix__ = "CONCH_SYNTHETIC_"

                # Documented: this comment describes it.
                documented: int = 1
                undocumented: str = "x"


            class DeeperSettings(SyntheticSettings, kw_only=True):
                __prefix__ = "CONCH_DEEPER_"

                also_undocumented: bool = False
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = reference.candidate_modules(tmp_path, [package])
    assert modules == ["synthetic_service.deep.config"]
    classes = [
        cls
        for cls in reference.settings_classes(reference.ROOT, [package])
        if cls.__module__.startswith("synthetic_service")
    ]
    assert {cls.__name__ for cls in classes} == {"SyntheticSettings", "DeeperSettings"}
    with pytest.raises(reference.MissingDescriptions) as raised:
        reference.sections([base, *classes], {})
    assert sorted(raised.value.fields) == [
        "synthetic_service.deep.config.DeeperSettings.also_undocumented",
        "synthetic_service.deep.config.DeeperSettings.undocumented",
        "synthetic_service.deep.config.SyntheticSettings.undocumented",
    ]
    for name in [m for m in sys.modules if m.startswith("synthetic_service")]:
        monkeypatch.delitem(sys.modules, name)

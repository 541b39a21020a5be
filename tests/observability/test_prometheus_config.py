"""Prometheus configuration and rules: promtool check config/rules and the alerts' unit tests."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conch.local_prometheus import JOBS, RULES_DIR, config

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    promtool is None,
    reason="needs promtool (Debian: apt-get install -y --no-install-recommends prometheus)",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert promtool is not None
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)


@needs_promtool
def test_rules_are_valid() -> None:
    files = sorted(str(p) for p in RULES_DIR.glob("*.yml"))
    assert len(files) == 2
    result = _promtool("check", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_every_alert_fires_and_stays_silent_in_promtool_tests() -> None:
    tests = PROM / "tests" / "conch.alerts.test.yml"
    result = _promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout + result.stderr
    # Each alert has a case where it fires and one where it does not.
    alerts = {
        rule["alert"]
        for path in RULES_DIR.glob("*.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    cases = [
        case
        for test in yaml.safe_load(tests.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    for alert in alerts:
        own = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in own), f"{alert}: no case where it fires"
        assert any(not c["exp_alerts"] for c in own), f"{alert}: no case where it stays silent"
    assert alerts >= {
        "ConchModelHighP99Latency",
        "ConchQueueAgeGrowing",
        "ConchHighErrorRatio",
        "ConchModelNoLiveWorker",
        "ConchVersionArmSlower",
        "ConchVersionArmFailing",
    }


@needs_promtool
def test_compose_config_is_valid(tmp_path: Path) -> None:
    # compose mounts deploy/prometheus at /etc/prometheus: check it with the rules beside it.
    text = (PROM / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/*.yml" in text
    shutil.copytree(PROM / "rules", tmp_path / "rules")
    (tmp_path / "prometheus.yml").write_text(
        text.replace("/etc/prometheus/rules/", str(tmp_path / "rules") + "/")
    )
    result = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 rule files found" in result.stdout
    jobs = {job["job_name"] for job in yaml.safe_load(text)["scrape_configs"]}
    assert set(JOBS) <= jobs  # the job names the local config, rules and dashboards use


@needs_promtool
def test_local_config_is_valid(tmp_path: Path) -> None:
    generated = config(
        {
            "conch-gateway": ["127.0.0.1:8000"],
            "conch-scheduler": ["127.0.0.1:8010"],
            "conch-worker": ["127.0.0.1:8020", "127.0.0.1:8021"],
        },
        self_target="127.0.0.1:9090",
    )
    path = tmp_path / "prometheus.yml"
    path.write_text(json.dumps(generated))
    result = _promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert [j["job_name"] for j in generated["scrape_configs"]] == ["prometheus", *JOBS]


def test_rule_tests_are_not_loaded_as_rules() -> None:
    # compose loads /etc/prometheus/rules/*.yml: test files must live elsewhere.
    assert not list(RULES_DIR.glob("*test*"))

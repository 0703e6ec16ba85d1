"""The alert rules the monitoring role ships (roles/monitoring/files/rules/*.yml), checked and unit-tested
by the real promtool: ``promtool check rules`` on every file, ``promtool test rules`` on one test file per
rule group (tests/unit/alert_rules/<group>_test.yml), every alert with a firing and a non-firing case, and
every metric the rules name a real one (the exporter's and vLLM's families, tests/fixtures/metrics/)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import known_metrics, metric_names, promtool

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
RULES = sorted((ROOT / "roles/monitoring/files/rules").glob("*.yml"))
TESTS = Path(__file__).parent / "alert_rules"
SEVERITIES = {"critical", "warning", "info"}


def _alerts(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"] if "alert" in rule]


def test_there_are_rule_groups() -> None:
    assert [p.stem for p in RULES] == ["npu", "targets", "vllm"]


@pytest.mark.parametrize("rules", RULES, ids=[p.stem for p in RULES])
def test_promtool_check_rules(rules: Path) -> None:
    argv = [promtool(), "check", "rules", str(rules)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_alerts(rules))} rules found" in done.stdout


@pytest.mark.parametrize("rules", RULES, ids=[p.stem for p in RULES])
def test_promtool_test_rules(rules: Path) -> None:
    test_file = TESTS / f"{rules.stem}_test.yml"
    assert test_file.is_file(), f"{rules.name} has no promtool test file {test_file}"
    done = subprocess.run(
        [promtool(), "test", "rules", test_file.name], cwd=TESTS, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("rules", RULES, ids=[p.stem for p in RULES])
def test_every_alert_fires_and_stays_quiet_in_its_tests(rules: Path) -> None:
    tests = yaml.safe_load((TESTS / f"{rules.stem}_test.yml").read_text(encoding="utf-8"))
    assert tests["rule_files"] == [f"../../../roles/monitoring/files/rules/{rules.name}"]
    cases = [case for test in tests["tests"] for case in test.get("alert_rule_test") or []]
    for alert in _alerts(rules):
        name = alert["alert"]
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name}: no firing case"
        assert any(not case["exp_alerts"] for case in mine), f"{name}: no non-firing case"


@pytest.mark.parametrize("rules", RULES, ids=[p.stem for p in RULES])
def test_every_alert_has_for_severity_summary_and_runbook(rules: Path) -> None:
    for alert in _alerts(rules):
        name = alert["alert"]
        assert re.fullmatch(r"\d+[smh]", str(alert.get("for", ""))), f"{name}: no for: window"
        assert alert["labels"]["severity"] in SEVERITIES, name
        assert alert["annotations"]["summary"].strip(), name
        assert len(alert["annotations"]["runbook"].split()) >= 8, f"{name}: the runbook line says too little"


@pytest.mark.parametrize("rules", RULES, ids=[p.stem for p in RULES])
def test_rules_name_only_real_metrics(rules: Path) -> None:
    known = known_metrics()
    for alert in _alerts(rules):
        unknown = metric_names(alert["expr"]) - known
        assert not unknown, f"{alert['alert']}: {sorted(unknown)} are no metric of the exporter or vLLM"


def test_metric_names_reads_an_expression() -> None:
    expr = (
        'sum by (le, pool) (rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[5m])) > 2 '
        "and on (instance) up == 1"
    )
    assert metric_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "up"}
    assert "vllm:no_such_metric" in metric_names("vllm:no_such_metric > 0") - known_metrics()

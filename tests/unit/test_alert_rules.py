"""The alert rules the monitoring role ships (roles/monitoring/files/rules/*.yml), checked and unit-tested
by the real promtool: ``promtool check rules`` on every file, ``promtool test rules`` on one test file per
rule group (tests/unit/alert_rules/<group>_test.yml), every alert with a firing and a non-firing case, and
every metric the rules name a real one (the exporter's and vLLM's families, tests/fixtures/metrics/, or the
series the role records itself). The SLO rules the role generates from the inventory (provision.monitoring)
are checked by promtool too, and drive VllmTtftP99OverSlo per profile."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.monitoring import TTFT_SLO_RECORD, slo_rules
from tests.helpers import known_metrics, metric_names, promtool, validate

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
RULES_DIR = ROOT / "roles/monitoring/files/rules"
RULES = sorted(RULES_DIR.glob("*.yml"))
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
    known = known_metrics() | {TTFT_SLO_RECORD}  # recorded by the role's generated rules/slo.yml
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


# Two pools on one node: chat's profile sets ttft_slo_ms 1500, batch's none (the role's default applies).
SLO_HOSTVARS: dict[str, Any] = {
    "node1": {
        "ansible_host": "10.0.0.1",
        "vllm_serve_profiles": {
            "chat": {"model": "/models/q", "served_model_name": "qwen", "ttft_slo_ms": 1500},
            "batch": {"model": "/models/q", "served_model_name": "qwen"},
        },
        "npu_pools_list": [
            {"name": "chat", "devices": [0], "port": 8000, "profile": "chat"},
            {"name": "batch", "devices": [1], "port": 8001, "profile": "batch"},
        ],
    }
}


def _ttft_series(port: int, pool: str, counts: tuple[str, str, str]) -> list[dict[str, str]]:
    labels = f'job="vllm",instance="10.0.0.1:{port}",host="node1",pool="{pool}",profile="{pool}"'
    return [
        {
            "series": f'vllm:time_to_first_token_seconds_bucket{{{labels},model_name="qwen",le="{le}"}}',
            "values": values,
        }
        for le, values in zip(("1.0", "2.5", "+Inf"), counts, strict=True)
    ]


RUNBOOK_TTFT = (
    "Long prompts or a long queue (vllm:num_requests_waiting, vllm:request_queue_time_seconds): lower "
    "max_num_batched_tokens for faster prefills, or add capacity for the model."
)


def test_generated_slo_rules_drive_the_ttft_alert_per_profile(tmp_path: Path) -> None:
    slo = slo_rules(["node1"], SLO_HOSTVARS, default_ttft_slo_ms=3000)
    assert [(r["record"], r["expr"], r["labels"]) for r in slo["groups"][0]["rules"]] == [
        (TTFT_SLO_RECORD, "vector(1.5)", {"host": "node1", "pool": "chat", "profile": "chat"}),
        (TTFT_SLO_RECORD, "vector(3)", {"host": "node1", "pool": "batch", "profile": "batch"}),
    ]
    (tmp_path / "slo.yml").write_text(yaml.safe_dump(slo))
    checked = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "slo.yml")], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0 and "SUCCESS: 2 rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    # Both pools answer their first token between 1 s and 2.5 s (p99 2.485 s): over chat's 1.5 s, under
    # batch's 3 s. Only the recorded thresholds tell them apart.
    slow = ("0x20", "0+60x20", "0+60x20")
    firing = {
        "exp_labels": {
            **{"severity": "warning", "job": "vllm", "instance": "10.0.0.1:8000", "host": "node1"},
            **{"pool": "chat", "profile": "chat", "model_name": "qwen"},
        },
        "exp_annotations": {
            "summary": "TTFT p99 of pool chat on node1 is 2.485s, over the SLO of profile chat",
            "runbook": RUNBOOK_TTFT,
        },
    }
    case = {
        "interval": "1m",
        "input_series": _ttft_series(8000, "chat", slow) + _ttft_series(8001, "batch", slow),
        "alert_rule_test": [{"eval_time": "15m", "alertname": "VllmTtftP99OverSlo", "exp_alerts": [firing]}],
    }
    rule_files = [str(tmp_path / "slo.yml"), str(RULES_DIR / "vllm.yml")]
    test = {"rule_files": rule_files, "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "slo_test.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run(
        [promtool(), "test", "rules", "slo_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-5", "ttft_slo_ms = -5: must be greater than 0"),
        ("fast", "ttft_slo_ms = 'fast': must be a valid number"),
    ],
    ids=["negative", "not-a-number"],
)
def test_validate_refuses_a_bad_ttft_slo(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
    message: str,
) -> None:
    group_vars = f"""\
    vllm_serve_profiles:
      p: {{model: /m, ttft_slo_ms: {value}}}
    """
    assert validate(tmp_path, group_vars, monkeypatch) == 2
    out = capsys.readouterr()
    text = out.out + out.err
    assert f"group_vars/npu_nodes.yml:2: group npu_nodes: vllm_serve_profiles.p.{message}" in text, text
    assert "1 problem(s)" in text and "Traceback" not in text, text

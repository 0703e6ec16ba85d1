"""``provision doctor`` names a root cause before the symptoms it causes (``symptoms`` in failures.yml), on
one node and across nodes; ``--since`` bounds the logs the probe reads (checked before any host is
touched); a port that went down and came back is named from its real ``hccn_tool -link_stat -g`` records.

Every log line and tool output here is a real capture (tests/fixtures/samples).
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend.facts import sections
from provision.doctor.catalog import load_catalog, shipped
from provision.doctor.diagnose import Finding, by_cause, diagnose
from provision.doctor.probe import DOCTOR_SCRIPT, PLOG_DIR, collect, parse_since, probe_command
from provision.errors import InputError
from tests.helpers import SAMPLES, fault_logs, probe_section
from tests.unit.test_doctor_cli import fake_nodes, inventory, run_cli  # noqa: F401  (inventory: a fixture)
from tests.unit.test_doctor_match import EXPECTED, HEALTHY_ENGINE, REAL_LINES, node_probe

pytestmark = pytest.mark.unit

CATALOG = shipped()
BLOCKS = fault_logs()
EI0002 = next(b for b in BLOCKS if b.failure == "hccl-notify-wait-timeout-ei0002").lines[0]
CQE = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013").lines[0]
WATCHDOG = next(b for b in BLOCKS if b.failure == "hccl-watchdog-timeout").lines[0]


def link_stat_capture() -> str:
    """MindCluster's capture of ``hccn_tool -i 0 -link_stat -g``: UP, DOWN, UP two seconds apart."""
    text = (SAMPLES / "hccn_tool_outputs.txt").read_text(encoding="utf-8")
    block = text.split("hccn_tool -i 0 -link_stat -g\n", 1)[1].split("\n\n", 1)[0]
    assert "[device 0]link up count       : 2" in block and "LINK DOWN" in block
    return block


def ordered(
    *probes: tuple[str, str], npus: dict[str, tuple[str, int]] | None = None
) -> dict[str, list[Finding]]:
    found = {host: diagnose(collect(text), EXPECTED, CATALOG, npus) for host, text in probes}
    return by_cause(found, CATALOG)


# -- the order: causes first --------------------------------------------------------------------------


def test_a_dead_link_comes_before_the_hccl_timeouts_it_causes() -> None:
    engine = [*HEALTHY_ENGINE, CQE, EI0002, WATCHDOG]
    findings = ordered(("node1", node_probe(engine=engine, link={5: "DOWN"})))["node1"]
    order = [f.id for f in findings]
    # the catalogue lists the HCCL timeouts first; the cause goes before them, and the CQE error before the
    # timeouts it causes in turn
    assert order.index("hccn-link-down") == 0, order
    assert order.index("roce-error-cqe-ei0013") < order.index("hccl-notify-wait-timeout-ei0002"), order
    assert order.index("hccl-notify-wait-timeout-ei0002") < order.index("hccl-watchdog-timeout"), order
    caused = {f.id: f.caused_by for f in findings}
    assert caused["hccn-link-down"] == []
    assert caused["roce-error-cqe-ei0013"] == ["hccn-link-down"]
    assert caused["hccl-notify-wait-timeout-ei0002"] == ["hccn-link-down", "roce-error-cqe-ei0013"]


def test_without_its_cause_a_symptom_keeps_the_catalogue_order_and_names_no_cause() -> None:
    engine = [*HEALTHY_ENGINE, EI0002, WATCHDOG]
    findings = ordered(("node1", node_probe(engine=engine, tls={2: 1})))["node1"]
    # mixed TLS causes connect timeouts, not execution timeouts: it blames neither; the notify timeout
    # causes the watchdog's, which comes after every finding without a cause
    assert [f.id for f in findings] == [
        "hccl-notify-wait-timeout-ei0002",
        "hccn-tls-mixed",
        "hccl-watchdog-timeout",
    ]
    assert [f.caused_by for f in findings] == [[], [], ["hccl-notify-wait-timeout-ei0002"]]


def test_a_symptom_names_the_cause_on_the_peer_node_its_evidence_names() -> None:
    line, _ = REAL_LINES["hccl-transport-init-ei0009"]  # dst_rank[0] ... remote_ip_addr[172.16.0.114]
    node1 = node_probe(engine=[*HEALTHY_ENGINE, line])
    node2 = node_probe(link={1: "DOWN"})
    found = ordered(("node1", node1), ("node2", node2), npus={"172.16.0.114": ("node2", 1)})
    symptom = next(f for f in found["node1"] if f.id == "hccl-transport-init-ei0009")
    assert symptom.peer_hosts == ["node2"]
    assert symptom.caused_by == ["node2: hccn-link-down"]
    # a healthy peer is blamed for nothing
    healthy = ordered(("node1", node1), ("node2", node_probe()), npus={"172.16.0.114": ("node2", 1)})
    assert next(f for f in healthy["node1"] if f.id == "hccl-transport-init-ei0009").caused_by == []


def _catalog_with(tmp_path: Path, symptoms: dict[str, list[str]]) -> Path:
    data = yaml.safe_load((Path(__file__).parents[2] / "provision/data/failures.yml").read_text())
    for entry in data["failures"]:
        entry.pop("symptoms", None)
        if entry["id"] in symptoms:
            entry["symptoms"] = symptoms[entry["id"]]
    path = tmp_path / "failures.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_catalogue_refuses_an_unknown_symptom_and_a_circle(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="failure 'hccn-link-down': symptoms names no other failure: 'nope'"):
        load_catalog(_catalog_with(tmp_path, {"hccn-link-down": ["nope"]}))
    circle = {"hccn-link-down": ["hccl-task-timeout"], "hccl-task-timeout": ["hccn-link-down"]}
    with pytest.raises(
        InputError,
        match=r"failures.yml: Value error, symptoms run in a circle: hccl-task-timeout -> hccn-link-down",
    ):
        load_catalog(_catalog_with(tmp_path, circle))
    assert load_catalog(_catalog_with(tmp_path, {"hccn-link-down": ["hccl-task-timeout"]}))


def test_the_text_report_says_what_to_fix_first(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    inventory: Path,  # noqa: F811
) -> None:
    probe = node_probe(engine=[*HEALTHY_ENGINE, EI0002], link={5: "DOWN"})
    fake_nodes(
        monkeypatch,
        {"node1": {"probe": probe, "holders": ""}, "node2": {"probe": node_probe(), "holders": ""}},
    )
    code, out = run_cli(["doctor", str(inventory)], monkeypatch, capsys)
    assert code == 1
    link = out.index("  [hccn-link-down] an NPU network port is down")
    timeout = out.index("  [hccl-notify-wait-timeout-ei0002]")
    assert link < timeout
    assert "    caused by: hccn-link-down (fix that first)" in out[timeout:]


# -- --since ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("6h", 21600), ("2d", 172800), ("1H", 3600)]
)
def test_since_takes_a_number_and_a_unit(text: str, seconds: int) -> None:
    assert parse_since(text) == seconds


@pytest.mark.parametrize("value", ["0m", "-1h", "5x", "1.5h", "h", "", "6 hours"])
def test_a_bad_since_exits_2_naming_the_option_before_any_host(
    value: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    inventory: Path,  # noqa: F811
) -> None:
    calls = fake_nodes(monkeypatch, {})
    code, out = run_cli(["doctor", str(inventory), f"--since={value}"], monkeypatch, capsys)
    assert code == 2, out
    assert out.startswith(
        f"error: --since {value}: give a duration above 0 as a number and a unit s, m, h or d"
    )
    assert calls == []


def test_since_reaches_the_probe(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    inventory: Path,  # noqa: F811
) -> None:
    calls = fake_nodes(monkeypatch, {"node1": {"probe": node_probe(), "holders": ""}})
    code, out = run_cli(["doctor", str(inventory), "--since", "30m", "--limit", "node1"], monkeypatch, capsys)
    assert code == 0, out
    assert [c["module_args"] for c in calls] == ["since_s=1800"]
    calls = fake_nodes(monkeypatch, {"node1": {"probe": node_probe(), "holders": ""}})
    run_cli(["doctor", str(inventory), "--limit", "node1"], monkeypatch, capsys)
    assert [c["module_args"] for c in calls] == [""]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_probe_reads_the_window_and_the_link_records(tmp_path: Path) -> None:
    """The node command run for real: journalctl is asked for the window (units and kernel), the window
    comes back with the output, and hccn_tool's link records of every NPU are read."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "journalctl.args"
    capture = tmp_path / "link_stat.txt"
    capture.write_text(link_stat_capture() + "\n")
    _stub(
        bin_dir,
        "journalctl",
        f'echo "$*" >> {calls}\ncase " $* " in *" -u vllm-chat.service "*) echo "{EI0002}" ;; esac\n',
    )
    _stub(
        bin_dir,
        "systemctl",
        'case "$1" in list-units) echo "vllm-chat.service loaded active running vLLM" ;;'
        " is-active) exit 3 ;; esac\n",
    )
    _stub(
        bin_dir,
        "hccn_tool",
        f'case "$3" in -link_stat) sed "s/device 0/device $2/" {capture} ;; *) exit 1 ;; esac\n',
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(since: int | None) -> tuple[dict[str, Any], list[str]]:
        calls.unlink(missing_ok=True)
        out = subprocess.run(
            ["sh", "-c", probe_command([0, 1], journal_lines=40, since_s=since)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=120,
        ).stdout
        return collect(out), calls.read_text().splitlines()

    node, asked = run(1800)
    assert node["since_s"] == 1800
    unit = next(a for a in asked if "-u vllm-chat.service" in a)
    assert "--since=-1800s" in unit.split()
    kernel = [a for a in asked if " -k " in f" {a} "]
    assert any("--since=-1800s" in a.split() for a in kernel), kernel  # the last hours: the window
    assert any("-b" in a.split() and "--since=-1800s" not in a.split() for a in kernel), kernel  # the boot
    assert node["journals"]["vllm-chat.service"] == [EI0002]
    assert sorted(node["link_stats"]) == ["0", "1"]
    assert node["link_stats"]["1"]["link_up_count"] == 2

    node, asked = run(None)
    assert node["since_s"] is None
    assert not any("--since=-1800s" in a for a in asked)
    assert any("--since=-6h" in a.split() for a in asked)  # the kernel's default: 6 hours


# -- a port that went down and came back ---------------------------------------------------------------


def _with_records(records: str, since: int | None = None, **kwargs: object) -> str:
    extra = probe_section("link_stat 0", records)
    if since:
        extra += probe_section("window", str(since))
    return node_probe(extra=extra, **kwargs)  # type: ignore[arg-type]


def test_a_flapped_port_is_named_from_its_real_link_records() -> None:
    findings = {
        f.id: f.evidence for f in diagnose(collect(_with_records(link_stat_capture())), EXPECTED, CATALOG)
    }
    assert findings["hccn-link-flapped"] == [
        "hccn_tool -i 0 -link_stat -g: LINK DOWN at Tue Jun  6 16:32:10 2023, LINK UP again at "
        "Tue Jun  6 16:32:12 2023; link up count 2"
    ]
    # the capture's own clock says 10:08:28 the next day: a window of 2 days holds the flap, 1 hour does not
    in_window = diagnose(collect(_with_records(link_stat_capture(), since=2 * 86400)), EXPECTED, CATALOG)
    assert "hccn-link-flapped" in [f.id for f in in_window]
    old = diagnose(collect(_with_records(link_stat_capture(), since=3600)), EXPECTED, CATALOG)
    assert "hccn-link-flapped" not in [f.id for f in old]


def test_near_misses_of_a_flap() -> None:
    capture = link_stat_capture()
    up_once = "\n".join(line for line in capture.splitlines() if "16:32:1" not in line)  # only the first UP
    assert "LINK DOWN" not in up_once and "LINK UP" in up_once
    assert "hccn-link-flapped" not in [
        f.id for f in diagnose(collect(_with_records(up_once)), EXPECTED, CATALOG)
    ]
    # down now: hccn-link-down's alone
    down_now = capture.replace("16:32:12 2023    LINK UP", "16:32:12 2023    LINK DOWN")
    found = [f.id for f in diagnose(collect(_with_records(down_now, link={0: "DOWN"})), EXPECTED, CATALOG)]
    assert "hccn-link-down" in found and "hccn-link-flapped" not in found


def test_a_plog_older_than_the_window_is_left_out(tmp_path: Path) -> None:
    plogs = tmp_path / "plog"
    plogs.mkdir()
    cqe = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013").lines[1]  # a plog's [ERROR] line
    old, new = plogs / "plog-100_20261203080000.log", plogs / "plog-200_20261203100000.log"
    old.write_text(cqe + "\n")
    new.write_text(cqe.replace("2040034", "2040035") + "\n")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    script = DOCTOR_SCRIPT.replace(PLOG_DIR, str(plogs))

    def plog_errors(*window: str) -> list[str]:
        out = subprocess.run(
            ["sh", "-c", script, "doctor-probe", "40", *window],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        return sorted(
            label.removeprefix("plog-errors ") for label, _ in sections(out) if "plog-errors" in label
        )

    assert plog_errors() == [str(old), str(new)]
    assert plog_errors("1800") == [str(new)]
    assert plog_errors("10800") == [str(old), str(new)]

"""``provision doctor`` as a user runs it: exit 0 healthy, 1 a problem found, 2 bad input (nothing touched),
the text report and ``--json``; the nodes' answers come from a fake of the runner seam."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provision.cli import doctor as doctor_cli
from provision.runner.run import ModuleRun
from tests import helpers
from tests.unit.test_doctor_match import DRIVER, REAL_LINES, node_probe

pytestmark = pytest.mark.unit

INVENTORY = f"""\
[npu_nodes]
node1 ansible_host=10.0.0.11 vllm_serve_api_key=sk-inventory-key-1234
node2 ansible_host=10.0.0.12

[npu_nodes:vars]
ascend_driver_version={DRIVER}
provision_allow_unlocked_versions=true
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(INVENTORY, encoding="utf-8")
    return path


Answer = dict[str, Any] | str


def fake_nodes(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Answer]) -> list[dict[str, Any]]:
    """The runner seam answers with ``answers`` (host -> probe result, or "unreachable"); its calls."""
    calls: list[dict[str, Any]] = []

    def run_module(
        module: str, inventory: Any, *, observer: Callable[[Any], None], **kwargs: Any
    ) -> ModuleRun:
        calls.append({"module": module, **kwargs})
        for host, answer in answers.items():
            if answer == "unreachable":
                event = {
                    "event": "runner_on_unreachable",
                    "event_data": {"host": host, "res": {"msg": "ssh: timed out"}},
                }
            else:
                event = {"event": "runner_on_ok", "event_data": {"host": host, "res": answer}}
            observer(event)
        return ModuleRun(rc=0, status="successful", stdout="")

    monkeypatch.setattr(doctor_cli, "run_module", run_module)
    return calls


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = helpers.run_cli(args, monkeypatch)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out + captured.err


def healthy() -> dict[str, str]:
    return {"probe": node_probe(), "holders": ""}


def test_healthy_nodes_exit_0_and_the_probe_is_the_read_only_action(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = fake_nodes(monkeypatch, {"node1": healthy(), "node2": healthy()})
    code, out = run_cli(["doctor", str(inventory)], monkeypatch, capsys)
    assert code == 0, out
    assert out.splitlines() == ["node1  OK", "node2  OK", "2/2 node(s) OK"]
    assert calls[0]["module"] == "provision.ascend.doctor_probe"
    assert calls[0]["host_pattern"] == "npu_nodes"


def test_a_problem_exits_1_naming_node_cause_fix_and_source(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = REAL_LINES["npu-busy-8005"][0]
    busy = {"probe": node_probe(npu_smi=line, npu_smi_rc="255"), "holders": ""}
    fake_nodes(monkeypatch, {"node1": healthy(), "node2": busy})
    code, out = run_cli(["doctor", str(inventory)], monkeypatch, capsys)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "node1  OK"
    assert lines[1] == "node2  1 problem(s)"
    assert lines[2] == "  [npu-busy-8005] npu-smi cannot open the NPUs (dcmi -8005)"
    assert lines[3] == f"    evidence: npu-smi info: {line}"
    assert lines[4].startswith("    cause: The NPU is already opened by another process or container")
    assert lines[5].startswith("    fix: Find the holder")
    assert lines[6] == (
        "    see: https://github.com/vllm-project/vllm-ascend/issues/2698, "
        "https://github.com/vllm-project/vllm-ascend/issues/632"
    )
    assert lines[-1] == "1/2 node(s) OK"


def test_json_for_ci_and_an_unreachable_node(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nodes(
        monkeypatch, {"node1": {"probe": node_probe(link={2: "DOWN"}), "holders": ""}, "node2": "unreachable"}
    )
    code, out = run_cli(["doctor", str(inventory), "--json"], monkeypatch, capsys)
    assert code == 1
    report = json.loads(out)
    assert report["ok"] is False and report["bundle"] is None
    node1, node2 = report["nodes"]
    assert node1["host"] == "node1" and node1["ok"] is False
    assert [f["id"] for f in node1["findings"]] == ["hccn-link-down"]
    assert node1["findings"][0]["evidence"] == ["hccn_tool -i 2 -link -g: link status: DOWN"]
    assert node2 == {
        "host": "node2",
        "ok": False,
        "reachable": False,
        "error": "ssh: timed out",
        "findings": [],
        "links": None,
    }


def test_limit_and_the_bundle(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = ["INFO start", "VLLM_API_KEY=sk-inventory-key-1234 vllm serve /models/x"]
    calls = fake_nodes(monkeypatch, {"node1": {"probe": node_probe(engine=engine), "holders": ""}})
    bundle = tmp_path / "out" / "support.tar.gz"
    bundle.parent.mkdir()
    code, out = run_cli(
        ["doctor", str(inventory), "--limit", "node1", "--bundle", str(bundle)], monkeypatch, capsys
    )
    assert calls[0]["limit"] == "node1"
    assert code == 0, out
    assert out.splitlines()[:2] == ["node1  OK", "1/1 node(s) OK"]
    assert f"bundle: {bundle} (" in out
    with tarfile.open(bundle) as tar:
        text = "".join(tar.extractfile(m).read().decode() for m in tar.getmembers())  # type: ignore[union-attr]
    assert "sk-inventory-key-1234" not in text
    assert "node2/" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["doctor", "{tmp}/nope.ini"], "nope.ini"),
        (["doctor", "{inv}", "--limit", "node9"], "--limit node9: matches no host or group of"),
        (
            ["doctor", "{inv}", "--bundle", "{tmp}/no/such/dir/b.tar.gz"],
            "--bundle {tmp}/no/such/dir/b.tar.gz: no such folder",
        ),
        (["doctor", "{inv}", "--bundle", "{tmp}/bundle.zip"], "--bundle {tmp}/bundle.zip: name a .tar.gz"),
        (
            ["doctor", "{inv}", "--private-key", "{tmp}/missing-key"],
            "--private-key {tmp}/missing-key: no such file",
        ),
        (["doctor"], "no inventory given"),
    ],
)
def test_bad_input_exits_2_naming_it_before_any_host(
    args: list[str],
    message: str,
    inventory: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = fake_nodes(monkeypatch, {})
    shown = [a.format(tmp=tmp_path, inv=inventory) for a in args]
    code, out = run_cli(shown, monkeypatch, capsys)
    assert code == 2, out
    assert message.format(tmp=tmp_path) in out
    assert out.startswith("error: ")
    assert calls == []

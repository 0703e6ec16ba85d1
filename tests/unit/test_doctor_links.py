"""``provision doctor`` shows what the HCCN gate's bandwidth check last measured (the head's record,
provision.paths.LINKS_PATH): each pair's figures in the text report and ``--json``, and a pair that fell
short of its floor or failed as a finding (hccn-link-slow), within ``--since``. The figures are made by the
house's own ``link_figures`` from hccl_test's documented result table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provision import paths
from provision.ascend.hccl_check import LinkRun, link_figures
from provision.doctor.catalog import shipped
from provision.doctor.diagnose import diagnose
from provision.doctor.probe import collect
from tests.helpers import probe_section, sample_captures
from tests.unit.test_doctor_cli import fake_nodes, healthy, inventory, run_cli  # noqa: F401
from tests.unit.test_doctor_match import EXPECTED, node_probe

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
TABLE = sample_captures("hccl_test_outputs.txt")["oam_tools_all_reduce_8p"]
CATALOG = shipped()


def record(port_gbps: float, *, launch_failed: bool = False) -> dict[str, object]:
    """The head's record after one pair test of NPU 3 with node2's NPU 3: the documented table (23.76
    GB/s at 64 MiB) against a port of ``port_gbps`` at the role's default threshold 0.5."""
    output = "ssh: connect to host node2 port 22: Connection refused\n" if launch_failed else TABLE
    run = LinkRun("node1", 3, "node2", 3, 255 if launch_failed else 0, output)
    return {"threshold": 0.5, "links": [link_figures(run, port_gbps, 0.5)]}


def probe_with(links: dict[str, object], age_s: int = 600, since: int | None = None) -> str:
    window = probe_section("window", str(since)) if since else ""
    return node_probe(extra=probe_section(f"links {age_s}", json.dumps(links, indent=2)) + window)


def test_the_record_path_is_the_roles_default() -> None:
    defaults = yaml.safe_load((ROOT / "roles/hccn_gate/defaults/main.yml").read_text())
    assert defaults["hccn_gate_links_record"] == paths.LINKS_PATH


def test_a_pair_below_its_floor_is_a_finding_naming_both_ends_and_the_figure() -> None:
    node = collect(probe_with(record(800)))  # floor 0.5 x 93.13 GB/s: the measured 23.76 is below
    assert node["links"]["age_s"] == 600 and node["links"]["threshold"] == 0.5
    found = {f.id: f.evidence for f in diagnose(node, EXPECTED, CATALOG)}
    assert found["hccn-link-slow"] == [
        "hccl_test all_reduce_test 10 min ago: node1 NPU 3 (port eth3) <-> node2 NPU 3 (port eth3): "
        "23.7625 GB/s at 67108864 bytes, below 50% of the port's nominal 800 Gbit/s (46.57 GB/s)"
    ]


def test_a_pair_above_its_floor_and_a_failed_launch_are_no_finding() -> None:
    for links in (record(200), record(200, launch_failed=True)):
        node = collect(probe_with(links))
        assert "hccn-link-slow" not in [f.id for f in diagnose(node, EXPECTED, CATALOG)]


def test_a_measurement_older_than_since_is_left_out_a_newer_one_counts() -> None:
    old = collect(probe_with(record(800), age_s=7200, since=3600))
    assert "hccn-link-slow" not in [f.id for f in diagnose(old, EXPECTED, CATALOG)]
    new = collect(probe_with(record(800), age_s=60, since=3600))
    assert "hccn-link-slow" in [f.id for f in diagnose(new, EXPECTED, CATALOG)]


def test_an_unreadable_record_is_said_not_a_crash() -> None:
    node = collect(node_probe(extra=probe_section("links 5", "{not json")))
    assert str(node["links"]).startswith("unreadable: ")
    assert "hccn-link-slow" not in [f.id for f in diagnose(node, EXPECTED, CATALOG)]
    node = collect(node_probe(extra=probe_section("links 5", '{"links": "x"}')))
    assert node["links"] == f"unreadable: {paths.LINKS_PATH} holds no list of links"


def test_the_report_shows_each_pairs_figures_and_json_carries_them(
    inventory: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_nodes(monkeypatch, {"node1": {"probe": probe_with(record(200)), "holders": ""}, "node2": healthy()})
    code, out = run_cli(["doctor", str(inventory)], monkeypatch, capsys)
    assert code == 0, out
    assert out.splitlines() == [
        "node1  OK",
        "  NPU links, hccl_test all_reduce_test by the HCCN gate 10 min ago:",
        "    node1 NPU 3 <-> node2 NPU 3: 23.76 GB/s (floor 11.64 GB/s) ok",
        "node2  OK",
        "2/2 node(s) OK",
    ]

    fake_nodes(monkeypatch, {"node1": {"probe": probe_with(record(800)), "holders": ""}, "node2": healthy()})
    code, out = run_cli(["doctor", str(inventory), "--json"], monkeypatch, capsys)
    assert code == 1
    node1, node2 = json.loads(out)["nodes"]
    assert [f["id"] for f in node1["findings"]] == ["hccn-link-slow"]
    [link] = node1["links"]["links"]
    assert (link["host"], link["device"], link["peer"], link["peer_device"], link["ok"]) == (
        "node1", 3, "node2", 3, False
    )  # fmt: skip
    assert link["bandwidth_gbs"] == 23.76245 and link["floor_gbs"] == 46.566
    assert node1["links"]["age_s"] == 600 and node2["links"] is None

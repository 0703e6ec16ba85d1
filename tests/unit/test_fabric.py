"""The NPU fabric's addressing plan: its expansion (A2, A3, per rail) and what `validate` refuses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from provision.ascend import fabric, hccn
from provision.ascend.hccn_gate import PROBE_SCRIPT, parse_probe, probe_argv
from provision.ascend.npu_smi import ParseError
from provision.cli import _playbook
from provision.inventory.load import load_inventory, plain
from provision_sim.hardware.testroot import SimRoot
from tests.helpers import run_cli, write_tree
from tests.unit.test_hccn_gate_checks import HCCN, driver_run, run_probe, simulated_node

__all__ = ["driver_run"]  # a fixture

pytestmark = pytest.mark.unit

A2_PLAN: dict[str, Any] = {
    "hccn_config_subnets": [{"subnet": "10.20.0.0/24", "gateway": "10.20.0.1"}],
    "hccn_config_first_host": 11,
}
A3_PLAN: dict[str, Any] = {
    "hccn_config_subnets": [
        {"subnet": "10.30.0.0/24", "gateway": "10.30.0.1"},
        {"subnet": "10.31.0.0/24", "gateway": "10.31.0.1", "netdetect": "10.31.0.254"},
    ],
    "hccn_config_devices": 16,
    "hccn_config_first_host": 11,
}


def test_a2_plan_puts_a_nodes_8_ports_in_one_segment_node_after_node() -> None:
    node0, problems0 = fabric.host_ports({**A2_PLAN, "hccn_config_node_index": 0})
    node1, problems1 = fabric.host_ports({**A2_PLAN, "hccn_config_node_index": 1})
    assert problems0 == problems1 == []
    assert [p.address for p in node0] == [f"10.20.0.{11 + d}" for d in range(8)]
    assert [p.address for p in node1] == [f"10.20.0.{19 + d}" for d in range(8)]
    assert {(p.netmask, p.gateway, p.netdetect) for p in node0 + node1} == {
        ("255.255.255.0", "10.20.0.1", "10.20.0.1")  # the detect address defaults to the gateway
    }


def test_a3_plan_puts_the_two_dies_of_each_npu_in_different_segments() -> None:
    ports, problems = fabric.host_ports({**A3_PLAN, "hccn_config_node_index": 1})
    assert problems == []
    assert len(ports) == 16
    # node 1 takes the second block of 8 addresses in each segment
    assert [p.address for p in ports[:4]] == ["10.30.0.19", "10.31.0.19", "10.30.0.20", "10.31.0.20"]
    assert ports[15].address == "10.31.0.26"
    assert (ports[1].gateway, ports[1].netdetect) == ("10.31.0.1", "10.31.0.254")


def test_per_rail_plan_matches_the_port_number() -> None:
    rails = [{"subnet": f"10.201.{n}.0/24", "gateway": f"10.201.{n}.1"} for n in range(8)]
    ports, problems = fabric.host_ports({"hccn_config_subnets": rails, "hccn_config_node_index": 1})
    assert problems == []
    assert [p.address for p in ports] == [f"10.201.{n}.11" for n in range(8)]


def test_a3_dies_in_one_segment_are_refused() -> None:
    listed = [f"10.30.0.{11 + d}" if d % 2 == 0 else f"10.31.0.{11 + d}" for d in range(16)]
    listed[3] = "10.30.0.99"  # NPU 1's second die in the first die's segment
    _, problems = fabric.host_ports({**A3_PLAN, "hccn_config_addresses": listed})
    assert (
        (fabric.ADDRESSES, 3),
        "NPU 3: 10.30.0.99 is outside its subnet 10.31.0.0/24 (hosts 10.31.0.1-10.31.0.254)",
    ) in problems, problems
    one = {**A3_PLAN, "hccn_config_subnets": A3_PLAN["hccn_config_subnets"][:1], "hccn_config_node_index": 0}
    _, problems = fabric.host_ports(one)
    assert [m for p, m in problems if p == (fabric.SUBNETS,)] == [
        "16 ports (A3): the two dies of each NPU must be in different segments; give two"
    ]


def test_no_plan_configures_nothing() -> None:
    assert fabric.host_ports({"hccn_config_subnets": A2_PLAN["hccn_config_subnets"]}) == ([], [])


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {
                "hccn_config_subnets": [{"subnet": "10.20.0.0/24", "gateway": "10.21.0.1"}],
                "hccn_config_node_index": 0,
            },
            ((fabric.SUBNETS, 0, "gateway"), "outside its subnet 10.20.0.0/24"),
        ),
        (
            {
                "hccn_config_subnets": [{"subnet": "192.168.1.0/24", "gateway": "192.168.1.1"}],
                "hccn_config_node_index": 0,
            },
            ((fabric.SUBNETS, 0, "subnet"), "which hccn_tool refuses"),
        ),
        (
            {
                "hccn_config_subnets": [{"subnet": "10.20.0.5/24", "gateway": "10.20.0.1"}],
                "hccn_config_node_index": 0,
            },
            ((fabric.SUBNETS, 0, "subnet"), "host bits set"),
        ),
        (
            {**A2_PLAN, "hccn_config_node_index": 40},
            ((fabric.NODE_INDEX,), "NPU 0 would take host 331 of 10.20.0.0/24"),
        ),
        (
            {**A2_PLAN, "hccn_config_addresses": [f"10.20.0.{11 + d}" for d in range(7)] + ["10.20.1.5"]},
            ((fabric.ADDRESSES, 7), "NPU 7: 10.20.1.5 is outside its subnet 10.20.0.0/24"),
        ),
        (
            {**A2_PLAN, "hccn_config_addresses": [f"10.20.0.{11 + d}" for d in range(7)] + ["10.20.0.11"]},
            ((fabric.ADDRESSES, 7), "NPU 7: 10.20.0.11 is also NPU 0's address"),
        ),
        (
            {**A2_PLAN, "hccn_config_addresses": [f"10.20.0.{11 + d}" for d in range(7)] + ["10.20.0.1"]},
            ((fabric.ADDRESSES, 7), "is the gateway of 10.20.0.0/24"),
        ),
        (
            {**A2_PLAN, "hccn_config_addresses": ["10.20.0.11"]},
            ((fabric.ADDRESSES,), "lists 1 address(es); hccn_config_devices is 8"),
        ),
    ],
    ids=[
        "gateway-outside",
        "reserved-segment",
        "host-bits",
        "plan-overflows",
        "address-outside",
        "address-twice",
        "address-is-gateway",
        "too-few",
    ],
)
def test_bad_plans_name_the_field(variables: dict[str, Any], expected: tuple[tuple[Any, ...], str]) -> None:
    _, problems = fabric.host_ports(variables)
    path, text = expected
    assert any(p == path and text in m for p, m in problems), problems


INVENTORY = """\
[npu_nodes]
node1 ansible_host=192.0.2.11
node2 ansible_host=192.0.2.12
"""
GROUP_PLAN = """\
hccn_config_subnets:
  - subnet: 10.20.0.0/24
    gateway: 10.20.0.1
hccn_config_first_host: 11
"""


def _validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> tuple[int, str]:
    inventory = write_tree(tmp_path, {"inventory.ini": INVENTORY, **files})
    contacted: list[object] = []
    monkeypatch.setattr(_playbook, "run_playbook", lambda *a, **k: contacted.append(a))
    code = run_cli(["validate", str(inventory)], monkeypatch)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert contacted == []
    return code, err


def test_validate_accepts_a_good_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _validate(
        tmp_path,
        monkeypatch,
        capsys,
        {
            "group_vars/npu_nodes.yml": GROUP_PLAN,
            "host_vars/node1.yml": "hccn_config_node_index: 0\n",
            "host_vars/node2.yml": "hccn_config_node_index: 1\n",
        },
    )
    assert code == 0, err


def test_validate_refuses_a_device_ip_twice_across_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node2 = (
        "hccn_config_addresses:\n" + "".join(f"  - 10.20.0.{19 + d}\n" for d in range(7)) + "  - 10.20.0.14\n"
    )
    code, err = _validate(
        tmp_path,
        monkeypatch,
        capsys,
        {
            "group_vars/npu_nodes.yml": GROUP_PLAN,
            "host_vars/node1.yml": "hccn_config_node_index: 0\n",
            "host_vars/node2.yml": node2,
        },
    )
    assert code == 2
    assert "host_vars/node2.yml:9: host node2: hccn_config_addresses[7] = '10.20.0.14': " in err, err
    assert "NPU 7's device address 10.20.0.14 is also NPU 3's on host node1" in err, err


def test_validate_refuses_a_gateway_outside_its_subnet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _validate(
        tmp_path,
        monkeypatch,
        capsys,
        {
            "group_vars/npu_nodes.yml": GROUP_PLAN.replace("gateway: 10.20.0.1", "gateway: 10.20.1.1"),
            "host_vars/node1.yml": "hccn_config_node_index: 0\n",
        },
    )
    assert code == 2
    assert "group_vars/npu_nodes.yml:3: group npu_nodes" in err, err
    assert "hccn_config_subnets[0].gateway = '10.20.1.1': outside its subnet 10.20.0.0/24" in err, err


def test_validate_refuses_an_address_outside_its_subnet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node1 = (
        "hccn_config_addresses:\n" + "".join(f"  - 10.20.0.{11 + d}\n" for d in range(7)) + "  - 10.99.0.5\n"
    )
    code, err = _validate(
        tmp_path,
        monkeypatch,
        capsys,
        {
            "group_vars/npu_nodes.yml": GROUP_PLAN,
            "host_vars/node1.yml": node1,
        },
    )
    assert code == 2
    assert "host_vars/node1.yml:9: host node1: hccn_config_addresses[7] = '10.99.0.5'" in err, err
    assert "NPU 7: 10.99.0.5 is outside its subnet 10.20.0.0/24" in err, err


def test_validate_refuses_an_out_of_range_device_count_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _validate(
        tmp_path,
        monkeypatch,
        capsys,
        {
            "group_vars/npu_nodes.yml": GROUP_PLAN + "hccn_config_devices: 32\n",
            "host_vars/node1.yml": "hccn_config_node_index: 0\n",
        },
    )
    assert code == 2
    assert err.count("hccn_config_devices = 32: must be at most 16") == 1, err


# -- configure: the role's read -> set -> read back, with the real probe script and the simulated tool ------

RAILS = [{"subnet": f"10.201.{n}.0/24", "gateway": f"10.201.{n}.1"} for n in range(8)]


def test_steps_set_only_what_differs_and_a_second_pass_sets_nothing(tmp_path: Path, driver_run: Path) -> None:
    sim = simulated_node(tmp_path / "node2", driver_run, 2)
    # node 2 of the per-rail plan already has its addresses and gateways (the simulator's layout); the
    # detect addresses are unset on a fresh node, and NPU 3 is moved by hand
    assert (
        sim.tool(HCCN, "-i", "3", "-ip", "-s", "address", "10.201.3.99", "netmask", "255.255.0.0").returncode
        == 0
    )
    ports, problems = fabric.host_ports({"hccn_config_subnets": RAILS, "hccn_config_node_index": 2})
    assert problems == []
    wanted = [port.as_dict() for port in ports]
    configs = [f"conf={n}" for n in range(8)]

    steps = fabric.config_steps(wanted, run_probe(sim, *configs))
    assert [s["label"] for s in steps if s["device"] == 3] == [
        "NPU 3 address: 10.201.3.99 -> 10.201.3.12/255.255.255.0",
        "NPU 3 netdetect: unset -> 10.201.3.1",
    ]
    assert {s["field"] for s in steps if s["device"] != 3} == {"netdetect"}
    for step in steps:
        done = sim.tool(HCCN, *step["args"])
        assert (done.returncode, done.stdout) == (0, "Cmd executed successfully!\n"), done.stderr

    after = run_probe(sim, *configs)
    assert fabric.config_mismatches(wanted, after) == []
    assert fabric.config_steps(wanted, after) == []
    conf = sim.path("/etc/hccn.conf").read_text().splitlines()
    assert "address_3=10.201.3.12" in conf and "netdetect_7=10.201.7.1" in conf


def test_mismatches_name_the_port_and_field() -> None:
    wanted = [fabric.Port(0, "10.20.0.11", "255.255.255.0", "10.20.0.1", "10.20.0.1").as_dict()]
    probe = {
        "npus": {
            "0": {
                "ip": None,
                "netmask": None,
                "gateway": "10.20.0.1",
                "netdetect": "10.20.0.1",
                "errors": [
                    "hccn_tool -i 0 -ip -g: exit 1: Get ipconf failed, because no ip was preset there!"
                ],
            }
        }
    }
    assert fabric.config_mismatches(wanted, probe) == [
        "NPU 0 address reads unset, not 10.20.0.11/255.255.255.0 (hccn_tool -i 0 -ip -g: exit 1: "
        "Get ipconf failed, because no ip was preset there!)"
    ]


# -- rank table ---------------------------------------------------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepseek-r1-2node" / "inventory.ini"


def test_explain_shows_the_rank_table_of_the_configured_addresses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["serve", "explain", str(EXAMPLE), "--json"], monkeypatch) == 0
    records = json.loads(capsys.readouterr().out)["instances"]
    tables = {r["host"]: r["rank_table"] for r in records}
    assert tables["atlas-a01"] == tables["atlas-a02"]
    found = tables["atlas-a01"]
    assert found["path"] == "/etc/provision/fabric/r1.ranktable.json"
    table = found["table"]
    assert (table["status"], table["version"], table["server_count"]) == ("completed", "1.0", "2")
    # the table's device_ip of each NPU is the address the addressing plan configures on it
    loaded = load_inventory(EXAMPLE)
    for index, server in enumerate(table["server_list"]):
        host = server["server_id"]
        ports, problems = fabric.host_ports(plain(dict(loaded.hosts[host])))
        assert problems == []
        assert [(d["device_id"], d["device_ip"]) for d in server["device"]] == [
            (str(p.device), p.address) for p in ports
        ]
        assert [d["rank_id"] for d in server["device"]] == [str(8 * index + n) for n in range(8)]
    assert all(isinstance(v, str) for s in table["server_list"] for d in s["device"] for v in d.values())

    assert run_cli(["serve", "explain", str(EXAMPLE), "atlas-a02"], monkeypatch) == 0
    text = capsys.readouterr().out
    assert "  rank table: /etc/provision/fabric/r1.ranktable.json (HCCL version 1.0" in text
    assert "    atlas-a02 (192.0.2.12): NPU 0 10.20.0.19 rank 8, NPU 1 10.20.0.20 rank 9," in text


def test_the_gate_builds_the_rank_table_from_the_addresses_it_read() -> None:
    from plugins.filter.hccn_gate import hccn_gate_rank_tables

    group = {
        "name": "ds",
        "pool": "ds",
        "hosts": ["n1", "n2"],
        "members": [
            {"host": "n1", "address": "192.0.2.11", "devices": [4, 5]},
            {"host": "n2", "address": "192.0.2.12", "devices": [4, 5]},
        ],
    }

    def probe(last: int) -> dict[str, Any]:
        npus = {str(d): {"ip": f"10.201.{d}.{last}"} for d in (4, 5)}
        return {"__hccn_gate_local": {"probe": {"npus": npus}}}

    [found] = hccn_gate_rank_tables([group], "n2", {"n1": probe(11), "n2": probe(12)})
    assert found["path"] == "/etc/provision/fabric/ds.ranktable.json"
    assert found["table"]["server_list"] == [
        {
            "server_id": "n1",
            "host_ip": "192.0.2.11",
            "device": [
                {"device_id": "4", "device_ip": "10.201.4.11", "rank_id": "0"},
                {"device_id": "5", "device_ip": "10.201.5.11", "rank_id": "1"},
            ],
        },
        {
            "server_id": "n2",
            "host_ip": "192.0.2.12",
            "device": [
                {"device_id": "4", "device_ip": "10.201.4.12", "rank_id": "2"},
                {"device_id": "5", "device_ip": "10.201.5.12", "rank_id": "3"},
            ],
        },
    ]
    with pytest.raises(AnsibleFilterError, match="n2 NPU 5: no configured address"):
        missing = probe(12)
        missing["__hccn_gate_local"]["probe"]["npus"]["5"] = {"ip": None}
        hccn_gate_rank_tables([group], "n1", {"n1": probe(11), "n2": missing})


def a3_node(root: Path, driver: Path, index: int) -> SimRoot:
    sim = SimRoot.create(root, name=f"node{index}", index=index, npus=16, model="910_93")
    assert sim.run([driver, "--full", "--install-for-all", "--quiet"]).returncode == 0
    assert sim.reboot().returncode == 0
    return sim


def test_an_a3_groups_rank_table_is_the_super_pod_variant_read_from_the_chips(
    tmp_path: Path, driver_run: Path
) -> None:
    """Two simulated A3 nodes, the gate's own probe (``super_pods``) on each: the chips' SDIDs and super
    pod become a version 1.2 table with ``super_device_id`` and ``super_pod_list`` (HCCL's A3 format)."""
    from plugins.filter.hccn_gate import hccn_gate_rank_tables

    devices = [2, 3]
    hostvars = {}
    for index, host in ((3, "n1"), (4, "n2")):
        sim = a3_node(tmp_path / host, driver_run, index)
        env = sim.env()
        env["PATH"] = f"{sim.path('/usr/local/bin')}:{env['PATH']}"
        argv = probe_argv(str(sim.path(HCCN)), devices=devices, super_pods=True)
        done = subprocess.run(
            ["sh", "-c", PROBE_SCRIPT, "hccn-probe", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        probe = parse_probe(done.stdout)
        for d in devices:
            assert probe["npus"][str(d)]["super_pod"] == {"sdid": (index << 22) | d, "super_pod_id": 0}, probe
        hostvars[host] = {"__hccn_gate_local": {"probe": probe}}
    group = {
        "name": "ds",
        "pool": "ds",
        "hosts": ["n1", "n2"],
        "members": [
            {"host": "n1", "address": "192.0.2.11", "devices": devices},
            {"host": "n2", "address": "192.0.2.12", "devices": devices},
        ],
    }
    [found] = hccn_gate_rank_tables([group], "n1", hostvars)
    table = found["table"]
    assert (table["version"], table["server_count"]) == ("1.2", "2")
    # An A2's npu-smi -m has no physical-id column: nothing is asked, the chips carry no super pod.
    a2 = simulated_node(tmp_path / "a2", driver_run, 5)
    env = a2.env()
    env["PATH"] = f"{a2.path('/usr/local/bin')}:{env['PATH']}"
    argv = probe_argv(str(a2.path(HCCN)), devices=devices, super_pods=True)
    done = subprocess.run(
        ["sh", "-c", PROBE_SCRIPT, "hccn-probe", *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert "@@@provision spod" not in done.stdout and "npu-smi" not in done.stdout, done.stdout
    assert all("super_pod" not in npu for npu in parse_probe(done.stdout)["npus"].values())
    assert table["server_list"][1]["device"] == [
        {"device_id": "2", "super_device_id": str((4 << 22) | 2), "device_ip": "10.201.2.14", "rank_id": "2"},
        {"device_id": "3", "super_device_id": str((4 << 22) | 3), "device_ip": "10.201.3.14", "rank_id": "3"},
    ]
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "n1"}, {"server_id": "n2"}]}
    ]


def test_the_super_pod_variant_needs_every_chip_and_one_pod_per_server() -> None:
    group = {
        "members": [
            {"host": "n1", "address": "192.0.2.11", "devices": [0, 1]},
            {"host": "n2", "address": "192.0.2.12", "devices": [0, 1]},
        ]
    }
    addresses = {h: {0: f"10.30.0.{n}", 1: f"10.31.0.{n}"} for h, n in (("n1", 11), ("n2", 12))}
    pods = {
        "n1": {0: {"sdid": 0, "super_pod_id": 0}, 1: {"sdid": 1, "super_pod_id": 0}},
        "n2": {0: {"sdid": 4, "super_pod_id": 1}, 1: {"sdid": 5, "super_pod_id": 1}},
    }
    table = fabric.rank_table(group, addresses, pods)
    assert table["super_pod_list"] == [  # the documented two-pod shape: one entry per pod, its servers
        {"super_pod_id": "0", "server_list": [{"server_id": "n1"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "n2"}]},
    ]
    partial = {"n1": pods["n1"], "n2": {0: pods["n2"][0]}}  # one chip's read failed: the AI-server form
    plain_table = fabric.rank_table(group, addresses, partial)
    assert plain_table["version"] == "1.0" and "super_pod_list" not in plain_table
    assert all("super_device_id" not in d for s in plain_table["server_list"] for d in s["device"])
    split = {**pods, "n2": {0: {"sdid": 4, "super_pod_id": 1}, 1: {"sdid": 5, "super_pod_id": 2}}}
    with pytest.raises(ValueError, match="n2: its NPUs read different super pods"):
        fabric.rank_table(group, addresses, split)


# -- hccl_test ----------------------------------------------------------------------------------------------


def test_hccl_test_table_parses_from_the_documented_sample() -> None:
    text = (SAMPLES / "hccl_test_outputs.txt").read_text(encoding="utf-8")
    sample = text.split("## oam_tools_all_reduce_8p\n", 1)[1]
    rows = hccn.parse_hccl_test(sample)
    assert len(rows) == 14
    assert rows[0] == hccn.HcclTestRow(8192, 764.55, 0.00998, "success")
    assert (rows[-1].data_size, rows[-1].alg_bandwidth_gbs) == (67108864, 23.76245)
    assert {row.check_result for row in rows} == {"success"}
    with pytest.raises(ParseError):
        hccn.parse_hccl_test("the minbytes is 8192, maxbytes is 67108864, iters is 20, warmup_iters is 5\n")

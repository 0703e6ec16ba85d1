"""The HCCN gate of multi-node serving groups: serving groups from the inventory, the probe's
output parsed with provision.ascend's hccn parsers, the verdict and its messages, the vllm_serve filter's
head/worker arguments, and the probe script run against the simulated hccn_tool in a temporary node root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provision.ascend.hccn_gate import (
    PROBE_SCRIPT,
    gate_problems,
    node_address,
    parse_probe,
    parse_ss_listeners,
    ping_plan,
    probe_argv,
    refusal_message,
    unit_of_cgroup,
)
from provision.inventory.groups import serving_groups
from provision.inventory.profiles import ProfileError
from provision.serving.multinode import (
    HCCL_IF_BASE_PORT,
    group_dict,
    hccl_host_ports,
    host_ranks,
    required_ports,
)
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror import run_files as mirror
from tests.helpers import icmp_allowed, load_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
DS = "deepseek-r1-w8a8-2node"
POOL = {"name": "ds", "devices": list(range(8)), "port": 8000, "profile": DS}
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


ROLE_FILTERS = load_module("hccn_gate_filters", ROOT / "plugins/filter/hccn_gate.py")
SERVE_FILTERS = load_module("vllm_serve_filters_mn", ROOT / "plugins/filter/vllm_serve.py")


def host(
    name: str, address: str, *pools: dict[str, Any], env: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"host": name, "address": address, "pools": list(pools), "profiles": {}, "env": env or {}}


# --------------------------------------------------------------------------------------------- groups


def test_two_nodes_make_one_group_head_first_in_inventory_order() -> None:
    single = {"name": "chat", "devices": list(range(8)), "port": 8001, "profile": "chat-32b-tp8"}
    [group] = serving_groups(
        [host("node1", "192.0.2.11", POOL, single), host("node2", "192.0.2.12", POOL), host("node3", "x")]
    )
    assert (group.name, group.hosts, group.head.address, group.rpc_port) == (
        "ds",
        ["node1", "node2"],
        "192.0.2.11",
        13389,
    )
    head, worker = group.members
    hccl = set(range(HCCL_IF_BASE_PORT, HCCL_IF_BASE_PORT + 32))
    assert set(required_ports(group, head)) == hccl | {8000, 13389}
    assert set(required_ports(group, worker)) == hccl, "a headless worker serves no API and no RPC port"
    ranks = host_ranks([group_dict(group)], "node2", node_ip="192.0.2.12", ifname="eth0")
    assert ranks["ds"] | {"hosts": None} == {
        "index": 1,
        "role": "worker",
        "group": "ds",
        "profile": DS,
        "head": "node1",
        "head_address": "192.0.2.11",
        "rpc_port": 13389,
        "native_dp": True,
        "hosts": None,
        "workers": ["node2"],
        "node_ip": "192.0.2.12",
        "ifname": "eth0",
    }
    assert host_ranks([group_dict(group)], "node3") == {}


def test_four_nodes_make_two_groups_and_three_are_refused() -> None:
    four = [host(f"n{i}", f"10.0.0.{i}", POOL) for i in range(1, 5)]
    groups = serving_groups(four)
    assert [(g.name, g.hosts) for g in groups] == [("ds #1", ["n1", "n2"]), ("ds #2", ["n3", "n4"])]
    with pytest.raises(ProfileError, match=r"defined on 3 host\(s\) \(n1, n2, n3\): not a multiple of 2"):
        serving_groups(four[:3])


def test_members_must_agree_on_the_profile() -> None:
    other = host("node2", "b", POOL)
    other["profiles"] = {
        DS: {"model": "/elsewhere", "nodes": 2, "tensor_parallel_size": 4, "data_parallel_size": 4}
    }
    with pytest.raises(ProfileError, match="must agree"):
        serving_groups([host("node1", "a", POOL), other])


def test_hccl_ports_follow_the_profile_environment() -> None:
    env = {"HCCL_IF_BASE_PORT": "50000", "HCCL_HOST_SOCKET_PORT_RANGE": "61000-61002"}
    [group] = serving_groups([host("a", "a", POOL, env=env), host("b", "b", POOL, env=env)])
    ports = hccl_host_ports(group.members[1].env)
    assert ports == [*range(50000, 50032), 61000, 61001, 61002]


# --------------------------------------------------------------------------------------------- parsing

# The verbatim -tls -g line of the samples (shared/reference/samples/hccn_tool_outputs.txt).
TLS = (
    "dev_id:{n}, tls switch[{v}](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
    "tls alarm time threshold[60]days"
)
LIFE = "valid_lft forever preferred_lft forever"
PROBE_OUTPUT = f"""
@@@provision tool /usr/local/Ascend/driver/tools/hccn_tool

@@@provision hccn 0 link 0
link status: UP

@@@provision hccn 0 net_health 0
net health status: Success

@@@provision hccn 0 ip 0
ipaddr:10.201.0.11
netmask:255.255.255.0

@@@provision hccn 0 tls 0
{TLS.format(n=0, v=0)}

@@@provision hccn 5 link 0
link status: DOWN

@@@provision hccn 5 net_health 0
net health status: Fault

@@@provision hccn 5 ip 1
Error: the ip address of device 5 is not configured.

@@@provision hccn 5 tls 0
{TLS.format(n=5, v=1)}

@@@provision ping 0 10.201.0.12 0
device 0 PING 10.201.0.12
recv seq=0,time=0.071000ms
1 packets transmitted, 1 received, 0.00% packet loss

@@@provision ping 5 10.201.5.12 0
device 5 PING 10.201.5.12
recv time out seq=0
1 packets transmitted, 0 received, 100.00% packet loss

@@@provision ss 0
LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:(("python",pid=4242,fd=5))
LISTEN 0 128 [::]:60003 [::]:* users:(("trainer",pid=77,fd=3),("trainer",pid=78,fd=3))

@@@provision cgroup 4242
0::/system.slice/vllm-ds.service

@@@provision cgroup 77
12:pids:/user.slice
1:name=systemd:/user.slice/user-0.slice/session-3.scope

@@@provision addr
1: lo    inet 127.0.0.1/8 scope host lo\\       {LIFE}
2: eth0    inet 192.0.2.11/24 brd 192.0.2.255 scope global eth0\\       {LIFE}

@@@provision resolve node1.example
192.0.2.11      STREAM node1.example
"""


def test_probe_output_parses_with_the_hccn_parsers() -> None:
    probe = parse_probe(PROBE_OUTPUT)
    assert probe["tool"] == HCCN and probe["tool_missing"] is None
    assert probe["npus"]["0"] == {
        "link": "UP",
        "net_health": "Success",
        "ip": "10.201.0.11",
        "netmask": "255.255.255.0",
        "tls": 0,
        "errors": [],
    }
    assert probe["npus"]["5"] == {
        "link": "DOWN",
        "net_health": "Fault",
        "ip": None,
        "netmask": None,
        "tls": 1,
        "errors": ["hccn_tool -i 5 -ip -g: exit 1: Error: the ip address of device 5 is not configured."],
    }
    assert [(p["device"], p["address"], p["success"], p["loss_pct"]) for p in probe["pings"]] == [
        (0, "10.201.0.12", True, 0.0),
        (5, "10.201.5.12", False, 100.0),
    ]
    assert probe["listeners"] == [
        {
            "address": "0.0.0.0",
            "port": 8000,
            "processes": [{"name": "python", "pid": 4242, "unit": "vllm-ds.service"}],
        },
        {
            "address": "::",
            "port": 60003,
            "processes": [
                {"name": "trainer", "pid": 77, "unit": "session-3.scope"},
                {"name": "trainer", "pid": 78, "unit": None},
            ],
        },
    ]
    assert node_address(probe, "192.0.2.11") == ("192.0.2.11", "eth0")
    assert node_address(probe, "node1.example") == ("192.0.2.11", "eth0")
    assert node_address(probe, "198.51.100.7") == (None, None), "not this node's address: no HCCL_IF_IP"


def test_ss_and_cgroup_edge_cases() -> None:
    assert parse_ss_listeners("LISTEN 0 5 127.0.0.53%lo:53 0.0.0.0:*\nnot a socket\n") == [
        {"address": "127.0.0.53%lo", "port": 53, "processes": []}
    ]
    assert unit_of_cgroup("0::/system.slice/vllm-ds.service/init.scope") == "init.scope"
    assert unit_of_cgroup("0::/system.slice/sshd.service\n") == "sshd.service"
    assert unit_of_cgroup("0::/\n") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pings": [(0, "10.0.0.1; reboot")]}, "IPv4"),
        ({"pings": [(0, "$(id)")]}, "IPv4"),
        ({"resolve": ["a b"]}, "not a host name"),
        ({"resolve": ["-x"]}, "not a host name"),
    ],
)
def test_probe_arguments_never_carry_shell_text(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        probe_argv(HCCN, **kwargs)


def test_probe_arguments() -> None:
    argv = probe_argv(HCCN, devices=[0, 5], pings=[(5, "10.201.5.12")], pkt=2, ports=True, addresses=True)
    assert argv == [HCCN, "dev=0", "dev=5", "ping=5,10.201.5.12", "pkt=2", "ports", "addr"]


# --------------------------------------------------------------------------------------------- verdict


def healthy(node: int, devices: range = range(8), tls: int = 0) -> dict[str, Any]:
    return {
        "tool": HCCN,
        "tool_missing": None,
        "npus": {
            str(n): {
                "link": "UP",
                "net_health": "Success",
                "ip": f"10.201.{n}.{10 + node}",
                "netmask": "255.255.255.0",
                "tls": tls,
                "errors": [],
            }
            for n in devices
        },
        "pings": [],
        "listeners": [],
        "ports_error": None,
        "addresses": [],
        "resolved": {},
    }


def answered(plan: list[dict[str, Any]], lost: set[tuple[int, str]] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "pings": [
            {
                "device": p["device"],
                "address": p["address"],
                "success": (p["device"], p["address"]) not in lost,
                "loss_pct": 100.0 if (p["device"], p["address"]) in lost else 0.0,
                "transmitted": 3,
                "received": 0 if (p["device"], p["address"]) in lost else 3,
                "error": None,
            }
            for p in plan
        ]
    }


HOSTS = ["node1", "node2"]
DEVICES = {"node1": list(range(8)), "node2": list(range(8))}
PORTS = {
    "node1": {8000: "the API port of pool ds", 60000: "an HCCL host port (HCCL_IF_BASE_PORT)"},
    "node2": {},
}


def verdict(probes: dict[str, Any], pings: dict[str, Any] | None = None, **kwargs: Any) -> list[str]:
    if pings is None:
        pings = {h: answered(ping_plan(DEVICES, probes, h)) for h in HOSTS}
    problems = gate_problems(
        HOSTS, DEVICES, probes, pings, kwargs.pop("ports", PORTS), unit="vllm-ds.service", **kwargs
    )
    return [p.message for p in problems]


def test_ping_plan_pairs_the_same_rail_of_every_other_node() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    plan = ping_plan(DEVICES, probes, "node1")
    assert [(p["device"], p["address"], p["peer"], p["peer_device"]) for p in plan] == [
        (n, f"10.201.{n}.12", "node2", n) for n in range(8)
    ]
    del probes["node2"]["npus"]["3"]["ip"]
    probes["node2"]["npus"]["3"]["ip"] = None
    assert 3 not in [p["device"] for p in ping_plan(DEVICES, probes, "node1")], "no address, no ping"


def test_a_healthy_group_passes() -> None:
    assert verdict({"node1": healthy(1), "node2": healthy(2)}) == []


def test_link_down_on_node2_npu5_is_named_with_its_command_and_what_to_do() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    probes["node2"]["npus"]["5"].update(link="DOWN", net_health="Fault")
    plan2 = ping_plan(DEVICES, probes, "node2")
    pings = {
        "node1": answered(ping_plan(DEVICES, probes, "node1")),
        "node2": answered(plan2, {(5, "10.201.5.11")}),
    }
    messages = verdict(probes, pings)
    assert messages[0] == (
        "node2 NPU 5: link DOWN (hccn_tool -i 5 -link -g) — check the optical module and cable of this NPU's "
        "port and the switch port it plugs into (hccn_tool -i 5 -optical -g, -link_stat -g), then run the "
        "apply again"
    )
    assert not any("net health" in m for m in messages), "a DOWN link explains its Fault: one message"
    assert messages[1].startswith(
        "node2 NPU 5: cannot reach node1 NPU 5 (10.201.5.11): 100.00% packet loss "
        "(hccn_tool -i 5 -ping -g address 10.201.5.11)"
    )
    assert len(messages) == 2
    text = refusal_message("serving group ds (profile x: head node1, workers node2)", [])
    assert text.startswith("HCCN gate: serving group ds (profile x: head node1, workers node2) refused")


def test_net_health_address_and_tool_problems() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    probes["node1"]["npus"]["2"]["net_health"] = "Init"
    probes["node1"]["npus"]["6"]["net_health"] = "Receive timeout"
    probes["node2"]["npus"]["4"].update(
        ip=None, errors=["hccn_tool -i 4 -ip -g: exit 1: Error: not configured."]
    )
    messages = verdict(probes)
    assert messages[0].startswith(
        "node1 NPU 2: net health Init (hccn_tool -i 2 -net_health -g) — no detection"
    )
    assert "hccn_tool -i 2 -netdetect -s address <gateway>" in messages[0]
    assert messages[1].startswith("node1 NPU 6: net health Receive timeout")
    assert messages[2] == (
        "node2 NPU 4: no NPU address (Error: not configured.) (hccn_tool -i 4 -ip -g) — set one: "
        "hccn_tool -i 4 -ip -s address A.B.C.D netmask M.M.M.M (or address_4/netmask_4 in /etc/hccn.conf)"
    )
    missing = {"node1": healthy(1), "node2": {**healthy(2), "tool": None, "tool_missing": HCCN}}
    assert verdict(missing)[0] == (
        f"node2: hccn_tool not found ({HCCN}) — install the NPU driver (playbooks/driver.yml), or set "
        "hccn_gate_tool to its path"
    )


def test_tls_must_be_the_same_across_the_group() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    probes["node2"]["npus"]["3"]["tls"] = 1
    [message] = verdict(probes)
    assert message.startswith(
        "node2 NPU 3: TLS enabled while 15 other NPU(s) of the group have it disabled "
        "(hccn_tool -i 3 -tls -g)"
    )
    assert "hccn_tool -i $i -tls -s enable 0" in message


def test_duplicate_npu_addresses_are_refused() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    probes["node2"]["npus"]["1"]["ip"] = "10.201.1.11"
    messages = verdict(probes)
    assert messages[0].startswith("node1 NPU 1: NPU address 10.201.1.11 is also used by node2 NPU 1")


def test_ports_held_by_others_are_refused_and_our_own_instance_is_fine() -> None:
    probes = {"node1": healthy(1), "node2": healthy(2)}
    probes["node1"]["listeners"] = [
        {
            "address": "0.0.0.0",
            "port": 8000,
            "processes": [{"name": "python", "pid": 9, "unit": "vllm-ds.service"}],
        },
        {
            "address": "::",
            "port": 60000,
            "processes": [{"name": "trainer", "pid": 77, "unit": "train.service"}],
        },
    ]
    [message] = verdict(probes)
    assert message == (
        "node1: port 60000, an HCCL host port (HCCL_IF_BASE_PORT), is held by trainer "
        "(pid 77, train.service) (ss -tlnp) — stop that process, or give this instance other HCCL "
        "ports (HCCL_IF_BASE_PORT in the profile's env; two instances on one host need different bases)"
    )
    probes["node1"]["ports_error"] = "ss (iproute2) is not installed: the ports in use cannot be listed"
    assert verdict(probes)[0].startswith("node1: ss (iproute2) is not installed")


def test_a_member_missing_from_the_run_refuses_the_group() -> None:
    probes = {"node1": healthy(1), "node2": None}
    messages = verdict(probes, in_play=["node1"])
    assert messages[0].startswith("node2: is not in this run (excluded by --limit")
    assert verdict({"node1": healthy(1), "node2": None}, in_play=HOSTS)[0] == (
        "node2: has no HCCN probe result (the probe failed on it)"
    )


# --------------------------------------------------------------------------------------------- role filters


class HostVars(dict[str, dict[str, Any]]):
    """What the filters see of Ansible's hostvars: a mapping host -> that host's variables."""


def test_role_filters_gate_and_publish_ranks() -> None:
    hostvars = HostVars(
        node1={"ansible_host": "192.0.2.11", "npu_pools_list": [POOL]},
        node2={"ansible_host": "192.0.2.12", "npu_pools_list": [POOL]},
        node3={"npu_pools_list": []},
    )
    groups = ROLE_FILTERS.hccn_gate_groups(["node1", "node2", "node3"], hostvars)
    assert ROLE_FILTERS.hccn_gate_mine(groups, "node3") == []
    assert ROLE_FILTERS.hccn_gate_devices(groups, "node2") == list(range(8))
    for name, index in (("node1", 1), ("node2", 2)):
        probe = healthy(index)
        probe["addresses"] = [{"ifname": "eth0", "address": f"192.0.2.1{index}", "prefix": 24}]
        hostvars[name]["__hccn_gate_local"] = {"changed": False, "probe": probe}
    plan = ROLE_FILTERS.hccn_gate_pings(groups, "node1", hostvars)
    assert [(p["device"], p["address"]) for p in plan] == [(n, f"10.201.{n}.12") for n in range(8)]
    for name in ("node1", "node2"):
        hostvars[name]["__hccn_gate_pings"] = {
            "probe": answered(ROLE_FILTERS.hccn_gate_pings(groups, name, hostvars))
        }
    passed = ROLE_FILTERS.hccn_gate_verdict(groups, "node2", hostvars, ["node1", "node2", "node3"])
    assert passed["ok"] and passed["message"] == ""
    hostvars["node2"]["__hccn_gate_local"]["probe"]["npus"]["5"]["link"] = "DOWN"
    refused = ROLE_FILTERS.hccn_gate_verdict(groups, "node1", hostvars, ["node1", "node2", "node3"])
    assert not refused["ok"]
    assert refused["message"].splitlines()[0] == (
        "HCCN gate: serving group ds (profile deepseek-r1-w8a8-2node: head node1, workers node2) refused; "
        "nothing of it is started. 1 problem(s):"
    )
    assert (
        refused["message"].splitlines()[1].startswith("  - node2 NPU 5: link DOWN (hccn_tool -i 5 -link -g)")
    )
    ranks = ROLE_FILTERS.hccn_gate_ranks(
        groups, "node2", hostvars["node2"]["__hccn_gate_local"], "192.0.2.12"
    )
    assert (ranks["ds"]["role"], ranks["ds"]["node_ip"], ranks["ds"]["ifname"]) == (
        "worker",
        "192.0.2.12",
        "eth0",
    )


def test_vllm_serve_builds_the_head_and_the_headless_worker() -> None:
    command = ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    headless = ["/v/bin/python", "-m", "vllm.entrypoints.cli.main", "serve"]
    rank = {
        "index": 0,
        "role": "head",
        "head": "node1",
        "head_address": "192.0.2.11",
        "rpc_port": 13389,
        "native_dp": True,
        "hosts": ["node1", "node2"],
        "node_ip": "192.0.2.11",
        "ifname": "eth0",
    }
    [head] = SERVE_FILTERS.vllm_serve_instances(
        [POOL], {}, command, ranks={"ds": rank}, headless_command=headless
    )
    worker_rank = {**rank, "index": 1, "role": "worker", "node_ip": "192.0.2.12"}
    [worker] = SERVE_FILTERS.vllm_serve_instances(
        [POOL], {}, command, ranks={"ds": worker_rank}, headless_command=headless
    )
    assert (head["start"], worker["start"]) == ("head", "worker")
    assert head["argv"][:3] == command and worker["argv"][:4] == headless
    assert "--headless" not in head["argv"]
    assert head["argv"][head["argv"].index("--data-parallel-address") + 1] == "192.0.2.11"
    assert worker["argv"][-3:] == ["--headless", "--data-parallel-start-rank", "2"]
    assert worker["argv"][worker["argv"].index("--data-parallel-address") + 1] == "192.0.2.11"
    assert worker["env"]["HCCL_IF_IP"] == "192.0.2.12" and worker["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    [ungated] = SERVE_FILTERS.vllm_serve_instances([POOL], {}, command)
    assert (ungated["multinode"], ungated["start"], ungated["nodes"]) == (None, "single", 2)

    hostvars = {"node1": {"__vllm_serve_changed": []}, "node2": {"__vllm_serve_changed": ["ds"]}}
    assert SERVE_FILTERS.vllm_serve_group_restart([head], hostvars) == ["ds"], (
        "a worker's change restarts the head"
    )
    hostvars["node2"]["__vllm_serve_changed"] = []
    assert SERVE_FILTERS.vllm_serve_group_restart([head], hostvars) == []


# ------------------------------------------------------------------------------- against the simulator


@pytest.fixture(scope="module")
def driver_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("mirror")
    paths = mirror.build_artifacts(dest, arch=os.uname().machine)
    return next(p for p in paths if p.name.startswith("Ascend-hdk-910b-npu-driver"))


def simulated_node(root: Path, driver: Path, index: int) -> SimRoot:
    sim = SimRoot.create(root, name=f"node{index}", index=index)
    done = sim.run([driver, "--full", "--install-for-all", "--quiet"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert sim.reboot().returncode == 0
    return sim


def run_probe(sim: SimRoot, *args: str) -> dict[str, Any]:
    argv = probe_argv(str(sim.path(HCCN)), **{})[:1] + list(args)
    done = subprocess.run(
        ["sh", "-c", PROBE_SCRIPT, "hccn-probe", *argv],
        env=sim.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return parse_probe(done.stdout)


def test_probe_script_against_the_simulated_hccn_tool(tmp_path: Path, driver_run: Path) -> None:
    sim = simulated_node(tmp_path / "node2", driver_run, 2)
    assert sim.tool(HCCN, "-i", "3", "-tls", "-s", "enable", "1").stdout == "Cmd executed successfully!\n"
    sim.set_faults({"link_down": [5]})
    probe = run_probe(sim, *(f"dev={n}" for n in range(8)), "ping=5,127.0.0.1", "ping=0,127.0.0.1", "pkt=1")
    assert probe["tool"] == str(sim.path(HCCN))
    assert probe["npus"]["5"]["link"] == "DOWN" and probe["npus"]["5"]["net_health"] == "Fault"
    assert probe["npus"]["0"] == {
        "link": "UP",
        "net_health": "Init",  # no detection address on a fresh node
        "ip": "10.201.0.12",
        "netmask": "255.255.255.0",
        "tls": 0,
        "errors": [],
    }
    assert probe["npus"]["3"]["tls"] == 1
    by_device = {p["device"]: p for p in probe["pings"]}
    assert by_device[5]["success"] is False and by_device[5]["loss_pct"] == 100.0
    if icmp_allowed():
        assert by_device[0]["success"] is True, by_device[0]
    devices = {"node1": list(range(8)), "node2": list(range(8))}
    node1 = healthy(1)
    messages = [
        p.message
        for p in gate_problems(
            ["node1", "node2"], devices, {"node1": node1, "node2": probe}, {}, {}, unit="vllm-ds.service"
        )
    ]
    assert any(m.startswith("node2 NPU 5: link DOWN (hccn_tool -i 5 -link -g)") for m in messages)
    assert any(m.startswith("node2 NPU 3: TLS enabled") for m in messages)

    missing = run_probe(SimRoot.create(tmp_path / "bare", index=3), "dev=0")
    assert missing["tool"] is None and missing["tool_missing"]

"""The simulated cluster itself: real SSH, real Ansible, flavours, networking, reboot, clean teardown.

The unit tests at the top need nothing; the ``cluster`` tests need root and systemd-nspawn (see conftest).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from provision.errors import EnvironmentProblem, InputError
from provision.inventory.load import load_inventory, plain
from provision_sim import cgroups, flavours, hardware, nodes
from provision_sim.cluster import Cluster
from provision_sim.network import Subnet
from provision_sim.nodes import Node
from tests.helpers import PROVISION

SIM_NPUS = 8  # per node in the session cluster (conftest)
# The fixtures of tests/conftest.py (sim_ansible, run_ansible, sim_cluster_factory).
AnsibleRunner = Callable[..., subprocess.CompletedProcess[str]]
ClusterFactory = Callable[..., Cluster]

# What ansible-core reports for each flavour (the contract roles dispatch on).
EXPECTED_FACTS = {
    "openeuler-22.03": {
        "distribution": "openEuler",
        "distribution_version": "22.03",
        "distribution_major_version": "22",
        "distribution_release": "LTS-SP1",
        "os_family": "RedHat",
        "pkg_mgr": "dnf",
    },
    "openeuler-24.03": {
        "distribution": "openEuler",
        "distribution_version": "24.03",
        "distribution_major_version": "24",
        "distribution_release": "LTS-SP1",
        "os_family": "RedHat",
        "pkg_mgr": "dnf",
    },
    "ubuntu-22.04": {
        "distribution": "Ubuntu",
        "distribution_version": "22.04",
        "distribution_major_version": "22",
        "distribution_release": "jammy",
        "os_family": "Debian",
        "pkg_mgr": "apt",
    },
}


# -- unit: no cluster ---------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "count", "expected"),
    [
        ("openeuler-22.03", 2, ["openeuler-22.03", "openeuler-22.03"]),
        ("openeuler-22.03,ubuntu-22.04", 3, ["openeuler-22.03", "ubuntu-22.04", "openeuler-22.03"]),
        (" Ubuntu-22.04 , openeuler-24.03", 2, ["ubuntu-22.04", "openeuler-24.03"]),
    ],
)
def test_os_list_is_used_in_turn(spec: str, count: int, expected: list[str]) -> None:
    assert [f.key for f in flavours.parse_os_list(spec, count)] == expected


@pytest.mark.unit
@pytest.mark.parametrize(
    ("spec", "count", "message"),
    [
        ("centos-7", 1, "unknown flavour centos-7"),
        ("", 1, "no flavour given"),
        ("ubuntu-22.04,openeuler-22.03", 1, "lists 2 flavours for 1 node"),
    ],
)
def test_bad_os_list_is_an_input_error(spec: str, count: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        flavours.parse_os_list(spec, count)


@pytest.mark.unit
def test_inventory_keeps_host_key_checking_on() -> None:
    folder = Path("/var/lib/provision-sim/c")
    node = Node("c", "node1", 1, "ubuntu-22.04", "10.200.7.11", 8, folder / "nodes/node1")
    cluster = Cluster(name="c", dir=folder, subnet=Subnet(7), base=Path("/base"), nodes=[node])
    lines = cluster.inventory().splitlines()
    assert "[npu_nodes]" in lines
    host_line = next(line for line in lines if line.startswith("node1 "))
    assert host_line == (
        f"node1 ansible_host=10.200.7.11 ansible_user=root ansible_ssh_private_key_file={folder}/id_ed25519"
        " ansible_python_interpreter=/usr/bin/python3 ascend_npu_count=8 provision_power_label=simulated"
        f" ansible_ssh_common_args='-o UserKnownHostsFile={folder}/known_hosts -o ControlPath={folder}/cp/%h'"
    )
    assert "StrictHostKeyChecking=no" not in cluster.inventory()


@pytest.mark.unit
def test_inventory_gives_every_node_its_npu_count(tmp_path: Path) -> None:
    """`sim up --npus 16 --model 910b3,910_93,310p3` (the README's mixed example): preflight and the pool
    checks read ascend_npu_count (default 8), so each host says its own count in both inventories."""
    nodes = [
        Node("c", f"node{i}", i, "openeuler-22.03", f"10.200.7.1{i}", 16, tmp_path / f"nodes/node{i}", model)
        for i, model in enumerate(["910B3", "Ascend910", "310P3"], start=1)
    ]
    cluster = Cluster(name="c", dir=tmp_path, subnet=Subnet(7), base=Path("/base"), nodes=nodes)
    host_lines = [line for line in cluster.inventory().splitlines() if line.startswith("node")]
    assert [" ascend_npu_count=16 " in line for line in host_lines] == [True, True, True]
    hosts = yaml.safe_load(cluster.complete_inventory())["all"]["children"]["npu_nodes"]["hosts"]
    assert {name: values["ascend_npu_count"] for name, values in hosts.items()} == {
        "node1": 16,
        "node2": 16,
        "node3": 16,
    }


@pytest.mark.unit
def test_subnet_addresses() -> None:
    subnet = Subnet(3)
    assert (subnet.controller_ip, subnet.host_ip, subnet.node_ip(1), subnet.node_ip(10)) == (
        "10.200.3.1",
        "10.200.3.254",
        "10.200.3.11",
        "10.200.3.20",
    )


@pytest.mark.unit
def test_without_root_up_says_what_is_needed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(EnvironmentProblem, match="must run as root"):
        Cluster.up("nobody", nodes=1, root=tmp_path)


@pytest.mark.unit
def test_cli_status_and_down_of_a_missing_cluster(tmp_path: Path) -> None:
    env = {**os.environ, "PROVISION_SIM_DIR": str(tmp_path), "CI": "1"}
    status = subprocess.run(
        [*PROVISION, "sim", "status", "--name", "absent"], capture_output=True, text=True, env=env
    )
    assert status.returncode == 1
    assert "no simulated cluster 'absent'" in status.stderr
    down = subprocess.run(
        [*PROVISION, "sim", "down", "--name", "absent"], capture_output=True, text=True, env=env
    )
    assert down.returncode == 0, down.stderr
    assert "nothing to do" in down.stdout


# -- the session cluster ------------------------------------------------------------------------------


@pytest.mark.cluster
def test_every_node_answers_ansible_over_ssh(sim_cluster: Cluster, sim_ansible: AnsibleRunner) -> None:
    done = sim_ansible("all", "ping", "", "-o")
    assert done.returncode == 0, done.stdout + done.stderr
    for node in sim_cluster.nodes:
        assert f"{node.name} | SUCCESS" in done.stdout


@pytest.mark.cluster
def test_every_node_boots_cleanly(sim_cluster: Cluster) -> None:
    """systemd reaches "running" with no failed unit: each node has its own cgroup tree."""
    for node in sim_cluster.nodes:
        state = sim_cluster.exec(node.name, ["systemctl", "is-system-running", "--wait"], timeout=120)
        failed = sim_cluster.exec(node.name, ["systemctl", "--failed", "--no-legend", "--plain"])
        assert (state.stdout.strip(), failed.stdout.strip()) == ("running", ""), node.name


@pytest.mark.cluster
def test_host_keys_were_recorded_at_up(sim_cluster: Cluster) -> None:
    """Strict host key checking against the cluster's known_hosts succeeds; an empty one fails."""
    node = sim_cluster.nodes[0]

    def ssh(known_hosts: Path) -> subprocess.CompletedProcess[str]:
        options = {
            "BatchMode": "yes",
            "StrictHostKeyChecking": "yes",
            "UserKnownHostsFile": str(known_hosts),
            "GlobalKnownHostsFile": "/dev/null",
            "ControlPath": "none",
        }
        argv = ["ssh", "-i", str(sim_cluster.private_key)]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        argv += [f"root@{node.ip}", "hostname"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    recorded = ssh(sim_cluster.known_hosts)
    assert (recorded.returncode, recorded.stdout.strip()) == (0, node.name), recorded.stderr
    unknown = ssh(Path("/dev/null"))
    assert unknown.returncode != 0
    assert "Host key verification failed" in unknown.stderr


@pytest.mark.cluster
def test_flavour_facts(sim_cluster: Cluster, sim_ansible: AnsibleRunner, tmp_path: Path) -> None:
    done = sim_ansible("all", "setup", "", "--tree", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    for node in sim_cluster.nodes:
        facts = json.loads((tmp_path / node.name).read_text())["ansible_facts"]
        observed = {key: facts[f"ansible_{key}"] for key in EXPECTED_FACTS[node.flavour]}
        assert observed == EXPECTED_FACTS[node.flavour], node.name
        assert facts["ansible_hostname"] == node.name
        assert facts["ansible_service_mgr"] == "systemd"
        # The node's own network, also in /sys (Ansible reads interfaces from /sys/class/net).
        assert sorted(facts["ansible_interfaces"]) == ["eth0", "lo"]
        assert facts["ansible_default_ipv4"]["address"] == node.ip
        assert facts["ansible_default_ipv4"]["gateway"] == sim_cluster.controller_ip


@pytest.mark.cluster
def test_openeuler_nodes_have_dnf_and_rpm_but_no_apt(sim_cluster: Cluster) -> None:
    for node in sim_cluster.nodes:
        present = sim_cluster.exec(
            node.name, ["sh", "-c", "for t in dnf rpm apt-get; do command -v $t; done"]
        )
        if node.flavour.startswith("openeuler"):
            assert present.stdout.split() == ["/usr/bin/dnf", "/usr/bin/rpm"], node.name
            assert sim_cluster.exec(node.name, ["rpm", "--eval", "%_dbpath"]).stdout.strip() == "/var/lib/rpm"
        else:
            assert present.stdout.split() == ["/usr/bin/apt-get"], node.name


@pytest.mark.cluster
def test_base_lacks_pciutils_and_net_tools(sim_cluster: Cluster) -> None:
    """The driver installer's "missing tools" failure depends on it; roles install them."""
    installed = (sim_cluster.base / "var/lib/dpkg/status").read_text()
    assert "Package: pciutils\n" not in installed
    assert "Package: net-tools\n" not in installed


@pytest.mark.cluster
def test_nodes_reach_each_other_by_name(sim_cluster: Cluster, sim_ansible: AnsibleRunner) -> None:
    names = " ".join(node.name for node in sim_cluster.nodes)
    script = f"for h in {names}; do ping -c1 -W2 $h >/dev/null || {{ echo unreachable $h; exit 1; }}; done"
    done = sim_ansible("all", "shell", script)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.cluster
def test_no_route_leaves_the_cluster(sim_cluster: Cluster) -> None:
    """Nodes route everything else to the controller namespace, which has no route onwards."""
    routes = subprocess.run(
        ["nsenter", f"--net={sim_cluster.controller_netns_path}", "ip", "-json", "-4", "route", "show"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fabric = [ipaddress.ip_interface(gateway).network for gateway in hardware.npu_fabric_gateways(SIM_NPUS)]
    expected = [(sim_cluster.subnet.cidr, "br0")] + [(str(network), "fabric") for network in fabric]
    assert sorted((route["dst"], route["dev"]) for route in json.loads(routes)) == sorted(expected)
    node_routes = sim_cluster.exec(
        sim_cluster.nodes[0].name, ["ip", "-4", "route", "get", "192.0.2.1"]
    ).stdout
    assert f"via {sim_cluster.controller_ip} dev eth0" in node_routes


@pytest.mark.cluster
def test_npu_fabric_reaches_other_nodes_npus(sim_cluster: Cluster) -> None:
    """Inside a node, the NPU fabric namespace (for hccn_tool -ping) reaches other nodes' NPU ports."""
    first, second = sim_cluster.nodes[:2]
    local = hardware.npu_fabric_addresses(first.number, first.npus)
    remote = hardware.npu_fabric_addresses(second.number, second.npus)[-1].split("/")[0]
    gateway = hardware.npu_fabric_gateways(first.npus)[0].split("/")[0]
    fabric = ["nsenter", f"--net={hardware.NPU_NETNS}"]
    addresses = sim_cluster.exec(
        first.name, [*fabric, "ip", "-4", "-o", "addr", "show", "dev", "eth0"]
    ).stdout
    assert [line.split()[3] for line in addresses.splitlines()] == local
    for target in (remote, gateway):
        ping = sim_cluster.exec(first.name, [*fabric, "ping", "-c1", "-W2", target])
        assert ping.returncode == 0, ping.stdout + ping.stderr
    # The node's own network is not the fabric.
    assert sim_cluster.exec(first.name, ["ping", "-c1", "-W1", remote]).returncode != 0


@pytest.mark.cluster
def test_reboot_really_reboots(sim_cluster: Cluster, sim_ansible: AnsibleRunner) -> None:
    node = sim_cluster.nodes[-1]
    boot_id = Path("/proc/sys/kernel/random/boot_id")
    before = sim_cluster.exec(node.name, ["cat", str(boot_id)]).stdout.strip()
    boots = node.boots
    done = sim_ansible(node.name, "reboot", "reboot_timeout=120")
    assert done.returncode == 0, done.stdout + done.stderr
    after = sim_ansible(node.name, "command", f"cat {boot_id}")
    assert after.returncode == 0, after.stdout + after.stderr
    assert before and before not in after.stdout
    assert node.boots == boots + 1
    assert sim_ansible(node.name, "ping").returncode == 0
    state = sim_cluster.exec(node.name, ["systemctl", "is-system-running", "--wait"], timeout=120)
    assert state.stdout.strip() == "running"


@pytest.mark.cluster
def test_cli_status_and_inventory(sim_cluster: Cluster, tmp_path: Path) -> None:
    env = {**os.environ, "CI": "1"}
    name = ["--name", sim_cluster.name]
    status = subprocess.run(
        [*PROVISION, "sim", "status", *name, "--json"], capture_output=True, text=True, env=env
    )
    assert status.returncode == 0, status.stderr
    states = {node["name"]: node["state"] for node in json.loads(status.stdout)["nodes"]}
    assert states == {node.name: "running" for node in sim_cluster.nodes}
    where = subprocess.run(
        [*PROVISION, "sim", "inventory", *name, "--path"], capture_output=True, text=True, env=env
    )
    assert (where.returncode, where.stdout) == (0, f"{sim_cluster.inventory_path}\n"), where.stderr
    inventory = subprocess.run(
        [*PROVISION, "sim", "inventory", *name], capture_output=True, text=True, env=env
    )
    assert inventory.returncode == 0, inventory.stderr
    # complete on its own: saved in another folder, Ansible sees every host variable the cluster's
    # inventory.ini + group_vars/ give (the mirror URLs above all), and validate accepts it
    saved = tmp_path / "lab.yml"
    saved.write_text(inventory.stdout)
    mine, theirs = load_inventory(saved), load_inventory(sim_cluster.inventory_path)
    assert set(mine.hosts) == {node.name for node in sim_cluster.nodes}
    assert {h: plain(v) for h, v in mine.hosts.items()} == {h: plain(v) for h, v in theirs.hosts.items()}
    assert "openeuler_repos_mirror_url" in mine.hosts["node1"]
    assert mine.group_hosts("npu_nodes") == theirs.group_hosts("npu_nodes")
    valid = subprocess.run([*PROVISION, "validate", str(saved)], capture_output=True, text=True, env=env)
    assert valid.returncode == 0, valid.stdout + valid.stderr


@pytest.mark.cluster
def test_power_loss_ends_the_whole_node_and_on_boots_it_again(sim_cluster: Cluster) -> None:
    node = sim_cluster.nodes[-1]
    env = {**os.environ, "CI": "1"}

    def sim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*PROVISION, "sim", *args, "--name", sim_cluster.name], capture_output=True, text=True, env=env
        )

    def state() -> str:
        done = sim("status", "--json")
        assert done.returncode == 0, done.stderr
        return str(next(n["state"] for n in json.loads(done.stdout)["nodes"] if n["name"] == node.name))

    marker = "/var/lib/provision-sim/power-drill"
    assert sim_cluster.exec(node.name, ["sh", "-c", f"echo kept > {marker} && sync"]).returncode == 0
    boots = node.boots
    # systemd-nspawn killed alone (how a power loss was first tried): what of the node lives on, status says
    runner = nodes.nspawn(node)
    assert runner is not None
    runner.signal(signal.SIGKILL)
    time.sleep(1)
    assert not runner.alive()
    if cgroups.pids(node.machine):
        assert state() == ("running" if nodes.ssh_ready(node) else "unreachable")
        off = sim("power", node.name, "off", "--hard")
        assert off.returncode == 0, off.stdout + off.stderr
        assert off.stdout.startswith(f"{node.name} stopped (power loss) in ")
    else:
        print(f"\n{node.name}: killing systemd-nspawn ended the node too")
    assert not cgroups.pids(node.machine) and not nodes.processes(node), "something of the node survived"
    assert state() == "stopped"
    on = sim("power", node.name, "on")
    assert on.returncode == 0, on.stdout + on.stderr
    assert on.stdout.startswith(f"{node.name} running (boot {boots + 1}) in ")
    assert state() == "running"
    assert sim_cluster.exec(node.name, ["cat", marker]).stdout == "kept\n", "the disk is as it was"
    sim_cluster.exec(node.name, ["rm", "-f", marker])
    again = sim("power", node.name, "on")
    assert (again.returncode, again.stderr.strip()) == (
        1,
        f"error: {node.name} is running: power it off first",
    )


# -- clusters of their own ----------------------------------------------------------------------------


def _traces(cluster: Cluster) -> dict[str, list[str]]:
    """Everything of ``cluster`` that `down` must remove."""
    pids = [ref.pid for node in cluster.nodes for ref in nodes.processes(node)]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    mounts = Path("/proc/mounts").read_text()
    return {
        "processes": [str(pid) for pid in pids if Path(f"/proc/{pid}").exists()],
        "namespaces": [
            line for line in namespaces.splitlines() if line.split()[0].startswith(f"psim-{cluster.name}")
        ],
        "mounts": [line for line in mounts.splitlines() if str(cluster.dir) in line],
        "cgroups": [
            str(path)
            for node in cluster.nodes
            for path in cgroups.node_cgroups(node.machine)
            if path.exists()
        ],
        "interfaces": [cluster.subnet.host_interface]
        if Path(f"/sys/class/net/{cluster.subnet.host_interface}").exists()
        else [],
        "files": [str(cluster.dir)] if cluster.dir.exists() else [],
    }


def _assert_down_leaves_nothing(cluster: Cluster) -> None:
    before = _traces(cluster)
    assert len(before["processes"]) == 3 * len(cluster.nodes)  # supervisor, systemd-nspawn, node init
    assert len(before["namespaces"]) == 2 * len(cluster.nodes) + 1  # node, its NPU fabric; controller
    assert len(before["mounts"]) == len(cluster.nodes)
    pids = [ref for node in cluster.nodes for ref in nodes.processes(node)]
    assert cluster.down() == []
    assert _traces(cluster) == {
        "processes": [],
        "namespaces": [],
        "mounts": [],
        "cgroups": [],
        "interfaces": [],
        "files": [],
    }
    assert not [ref.pid for ref in pids if ref.alive()]
    assert Cluster.load(cluster.name) is None


@pytest.mark.cluster
def test_down_leaves_nothing(sim_cluster_factory: ClusterFactory) -> None:
    cluster = sim_cluster_factory("down", nodes=2, os_list="ubuntu-22.04,openeuler-22.03")
    try:
        assert all(node.state == "running" for node in cluster.status())
    finally:
        _assert_down_leaves_nothing(cluster)


@pytest.mark.cluster
@pytest.mark.slow
def test_ten_nodes_up_and_down(sim_cluster_factory: ClusterFactory, run_ansible: AnsibleRunner) -> None:
    started = time.monotonic()
    cluster = sim_cluster_factory("ten", nodes=10, os_list="openeuler-22.03,ubuntu-22.04")
    try:
        print(f"10 nodes: {cluster.timings} (total with cleanup {time.monotonic() - started:.1f} s)")
        assert cluster.timings["total"] - cluster.timings["base"] < 15  # target 5 s; slack for busy CI
        done = run_ansible(cluster.inventory_path, "all", "ping", "", "-o", "--forks", "10")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("SUCCESS") == 10
    finally:
        down_started = time.monotonic()
        _assert_down_leaves_nothing(cluster)
        print(f"10 nodes down in {time.monotonic() - down_started:.1f} s")


@pytest.mark.cluster
def test_nodes_have_writable_cgroups_and_data_disks(sim_cluster: Cluster) -> None:
    """What a container engine in a node needs: writable controllers, a non-overlay /var/lib/docker."""
    node = sim_cluster.node("node1")
    script = (
        "set -e; for c in /sys/fs/cgroup/*/; do c=${c%/}; case ${c##*/} in systemd|unified) continue;; esac;"
        " mkdir $c/ptest && rmdir $c/ptest && echo writable ${c##*/}; done;"
        " stat -f -c %T /var/lib/docker /var/lib/containers"
    )
    done = nodes.exec_in(node, ["sh", "-c", script], timeout=30)
    assert done.returncode == 0, done.stderr
    writable = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("writable ")}
    assert {path.name for path in cgroups.controllers()} <= writable
    disk_types = done.stdout.splitlines()[-2:]
    assert len(disk_types) == 2 and "overlayfs" not in disk_types, done.stdout

"""Every simulated vendor tool, reached over real SSH, parses with provision's parsers to the node's config.

Two nodes (openEuler + Ubuntu flavour, 4 NPUs each) get their prerequisites from the cluster's mirror through
the repos playbook, then the driver and firmware `.run` files by hand, as the vendor guide has it. Before the
reboot the driver is not active; after it every tool answers in the real formats with the values written in
the node's /etc/provision-sim/hardware.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from provision.ascend import (
    ascend_devices,
    lock,
    parse_hccn_ip,
    parse_hccn_link,
    parse_hccn_net_health,
    parse_hccn_ping,
    parse_hccn_tls,
    parse_lspci,
    parse_npu_smi_board,
    parse_npu_smi_chip_map,
    parse_npu_smi_health,
    parse_npu_smi_info,
    parse_npu_smi_list,
    parse_npu_smi_power,
    parse_npu_smi_usages,
)
from provision_sim.cluster import Cluster

pytestmark = pytest.mark.cluster

STACK = lock.default_stack()
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


def ssh(cluster: Cluster, node: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One command on the node over real SSH (key auth, host key checked against the cluster's file)."""
    ip = cluster.node(node).ip
    argv = [
        "ssh", "-i", str(cluster.private_key), "-o", f"UserKnownHostsFile={cluster.known_hosts}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{ip}", command,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check:
        assert done.returncode == 0, f"{node}: {command}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(sim_cluster_module_factory: Callable[..., Cluster]) -> Cluster:
    cluster = sim_cluster_module_factory("tools", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", npus=4)
    env = {**os.environ, "CI": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "provision", "apply", str(cluster.inventory_path), "-p", "repos", "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    arch = platform.machine()
    mirror = f"{cluster.mirror_url}/ascend"
    driver = f"Ascend-hdk-910b-npu-driver_{STACK['driver']}_linux-{arch}.run"
    firmware = f"Ascend-hdk-910b-npu-firmware_{STACK['firmware']}.run"
    for node in ("node1", "node2"):
        ssh(cluster, node, "useradd -r -U -M -s /sbin/nologin HwHiAiUser")
        for name in (driver, firmware):
            fetch = f"import urllib.request as u; u.urlretrieve('{mirror}/{name}', '/root/{name}')"
            ssh(cluster, node, f'python3 -c "{fetch}"')
        ssh(cluster, node, f"sh /root/{driver} --full --install-for-all --quiet --nox11")
        rc = ssh(cluster, node, f"sh /root/{firmware} --full --quiet --nox11", check=False).returncode
        assert rc in (0, 2), f"firmware exit {rc}"
    return cluster


def node_config(cluster: Cluster, node: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(ssh(cluster, node, "cat /etc/provision-sim/hardware.json").stdout)
    return config


def reboot_all(cluster: Cluster) -> None:
    before = {n: ssh(cluster, n, "cat /proc/sys/kernel/random/boot_id").stdout for n in ("node1", "node2")}
    boots = cluster.boots()
    for node in before:
        ssh(cluster, node, "systemctl reboot", check=False)
    cluster.wait_ready(rebooted=boots)
    for node, boot_id in before.items():
        assert ssh(cluster, node, "cat /proc/sys/kernel/random/boot_id").stdout != boot_id


def test_tools_before_and_after_the_reboot(installed: Cluster) -> None:
    cluster = installed
    # Installed, not yet active: npu-smi cannot talk to the driver, no device nodes.
    for node in ("node1", "node2"):
        assert ssh(cluster, node, "npu-smi info", check=False).returncode != 0
        assert ssh(cluster, node, "ls /dev/davinci0", check=False).returncode != 0

    reboot_all(cluster)

    for node in ("node1", "node2"):
        config = node_config(cluster, node)
        npus = config["npus"]

        devices = ascend_devices(parse_lspci(ssh(cluster, node, "lspci -n -d 19e5:").stdout))
        assert [d.bus_id.upper() for d in devices] == sorted(n["bus_id"].upper() for n in npus)

        info = parse_npu_smi_info(ssh(cluster, node, "npu-smi info").stdout)
        assert info.driver_version == STACK["driver"]
        assert len(info.npus) == 4 and info.all_healthy
        for npu, expected in zip(info.npus, npus, strict=True):
            assert (npu.id, npu.bus_id, npu.name) == (expected["id"], expected["bus_id"], config["model"])
            assert (npu.power_w, npu.temp_c) == (expected["power_w"], expected["temp_c"])
            assert (npu.hbm_used_mb, npu.hbm_total_mb) == (expected["hbm_used_mb"], expected["hbm_total_mb"])

        listing = parse_npu_smi_list(ssh(cluster, node, "npu-smi info -l").stdout)
        assert listing.total_count == 4 and listing.npu_ids == (0, 1, 2, 3)
        chips = parse_npu_smi_chip_map(ssh(cluster, node, "npu-smi info -m").stdout)
        assert {c.chip_name for c in chips if not c.is_mcu} == {f"Ascend {config['model']}"}

        board = parse_npu_smi_board(ssh(cluster, node, "npu-smi info -t board -i 1").stdout)
        assert (board.software_version, board.firmware_version) == (STACK["driver"], STACK["firmware"])
        assert board.serial_number == npus[1]["serial"] and board.compatible
        usages = parse_npu_smi_usages(ssh(cluster, node, "npu-smi info -t usages -i 2").stdout)
        assert usages.hbm_capacity_mb == npus[2]["hbm_total_mb"]
        power = parse_npu_smi_power(ssh(cluster, node, "npu-smi info -t power -i 3").stdout)
        assert power.power_w == npus[3]["power_w"]
        assert parse_npu_smi_health(ssh(cluster, node, "npu-smi info -t health -i 0").stdout).ok

        for npu in npus:
            ip = parse_hccn_ip(ssh(cluster, node, f"{HCCN} -i {npu['id']} -ip -g").stdout)
            assert (ip.ipaddr, ip.netmask) == (npu["ip"], npu["netmask"])
            assert parse_hccn_link(ssh(cluster, node, f"{HCCN} -i {npu['id']} -link -g").stdout) == "UP"
        assert parse_hccn_tls(ssh(cluster, node, f"{HCCN} -i 0 -tls -g").stdout).dev_id == 0
        assert parse_hccn_net_health(ssh(cluster, node, f"{HCCN} -i 0 -net_health -g").stdout).status


def test_hccn_ping_really_tests_reachability(installed: Cluster) -> None:
    cluster = installed
    peer = node_config(cluster, "node2")["npus"][0]["ip"]
    ok = parse_hccn_ping(ssh(cluster, "node1", f"{HCCN} -i 0 -ping -g address {peer} pkt 3").stdout)
    assert ok.success and ok.received == 3
    # 10.201.0.250 is inside the simulated NPU fabric, and no NPU has it.
    lost = ssh(cluster, "node1", f"{HCCN} -i 0 -ping -g address 10.201.0.250 pkt 2", check=False)
    assert not parse_hccn_ping(lost.stdout).success


def test_an_unhealthy_npu_shows_in_npu_smi(installed: Cluster) -> None:
    cluster = installed
    path = "/etc/provision-sim/hardware.json"
    config = node_config(cluster, "node2")
    config["faults"] = {"npu_health": {"2": "Critical"}}
    ssh(cluster, "node2", f"cat > {path} <<'EOF'\n{json.dumps(config)}\nEOF")
    try:
        info = parse_npu_smi_info(ssh(cluster, "node2", "npu-smi info").stdout)
        assert [n.id for n in info.unhealthy] == [2] and info.npu(2).health == "Critical"
    finally:
        config["faults"] = {}
        ssh(cluster, "node2", f"cat > {path} <<'EOF'\n{json.dumps(config)}\nEOF")

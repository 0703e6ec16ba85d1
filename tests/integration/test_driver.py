"""The ascend_driver role on simulated nodes: fresh install, upgrade in batches, drills that must stop.

Each test starts its own small cluster (``sim_cluster_factory``) because it reboots nodes and leaves drivers
installed: the session cluster stays fresh for the tests that expect an untouched node. The nodes get their
prerequisites (pciutils, net-tools, dkms, gcc, make, kernel headers) from the cluster's local mirror through
``playbooks/repos.yml``, and the vendor ``.run`` files (locked set and the older 25.0.rc1.1 / 8.2.RC1 set)
from the same mirror, as on an air-gapped site.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from provision.ascend import lock, parse_install_log, parse_npu_smi_board, parse_npu_smi_info
from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe
from provision.ascend.hardware import model_for_line
from provision.image.spec import Target
from provision.paths import ansible_root
from provision.runner.run import ansible_env
from provision.serving.image_stack import verdict
from provision_sim import hardware
from provision_sim.cluster import Cluster
from tests.helpers import Run, cluster_vars, copy_inventory, exists, host_vars, sh
from tests.helpers import provision as run_provision

pytestmark = pytest.mark.cluster

ClusterFactory = Callable[..., Cluster]
LOCKED = lock.default_stack()
OLD: dict[str, Any] = {
    "ascend_driver_version": "25.0.rc1.1",
    "ascend_driver_firmware_version": "7.7.0.1.231",
    "cann_version": "8.2.RC1",
    "cann_nnal_version": "8.2.RC1",
    "provision_allow_unlocked_versions": True,
}
INSTALL_LOG = "/var/log/ascend_seclog/ascend_install.log"
FACT = "/etc/ansible/facts.d/ascend.fact"
CANN_FACT = "/etc/ansible/facts.d/cann.fact"
# The stack a site upgrades from, with an older HDK release of its lines per NPU line (driver, firmware): the
# A2's 25.0.rc1.1 (the 910B samples) and the A3's 25.0.rc1.3 (the A3 install notes, [a3ops] of
# provision/data/hardware.yml), both on the simulated mirror.
OLD_STACK = "0.18.0"
OLD_HDK = {"910b": ("25.0.rc1.1", "7.7.0.1.231"), "a3": ("25.0.rc1.3", "7.7.0.3.228")}
POST_GATE = "ascend_driver : Check the driver, firmware, device nodes and NPU health after the reboot"
REBOOT = "ascend_driver : Reboot to load the new driver and firmware"


# -- running provision ------------------------------------------------------------------------------------


def provision(verb: str, inventory: Path, playbook: str, *args: str, timeout: float = 900) -> Run:
    return run_provision(verb, inventory, "-p", playbook, *args, timeout=timeout)


def ansible_playbook(inventory: Path, *playbooks: str) -> subprocess.CompletedProcess[str]:
    """Plain ansible-playbook with the project's ansible.cfg (what users without provision run)."""
    env = {**os.environ, **ansible_env()}  # the project's ansible.cfg, the collection on the path
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory)]
    argv += [str(ansible_root() / "playbooks" / f"{name}.yml") for name in playbooks]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)


def inventory(cluster: Cluster, folder: Path, **group_vars: Any) -> Path:
    """The cluster's inventory and mirror variables, copied to ``folder`` with ``group_vars`` added."""
    return copy_inventory(cluster, folder, cluster_vars(cluster, **group_vars))


# -- looking at nodes ----------------------------------------------------------------------------------------


def boot_id(cluster: Cluster, node: str) -> str:
    return sh(cluster, node, "cat /proc/sys/kernel/random/boot_id").strip()


def version_info(cluster: Cluster, node: str, what: str) -> str | None:
    done = cluster.exec(node, ["cat", f"/usr/local/Ascend/{what}/version.info"])
    if done.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line).get("Version")


def assert_driver_running(
    cluster: Cluster, node: str, driver: str, firmware: str, npus: int, chips_per_npu: int = 1
) -> None:
    """npu-smi sees every NPU healthy at ``driver``, the chips run ``firmware``, the device nodes exist
    (``npus``: chips, one /dev/davinciN each; an Atlas A3 NPU has two)."""
    info = parse_npu_smi_info(sh(cluster, node, "npu-smi info"))
    assert info.driver_version == driver, node
    assert len(info.npu_ids) == npus // chips_per_npu, node
    assert info.all_healthy, f"{node}: {[(n.id, n.health) for n in info.npus]}"
    board = parse_npu_smi_board(sh(cluster, node, "npu-smi info -t board -i 0"))
    assert (board.software_version, board.firmware_version, board.compatible) == (driver, firmware, True)
    assert (version_info(cluster, node, "driver"), version_info(cluster, node, "firmware")) == (
        driver,
        firmware,
    )
    devices = [f"/dev/davinci{i}" for i in range(npus)] + [
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]
    owners = sh(cluster, node, "stat -c '%n %U %a' " + " ".join(devices)).split("\n")
    assert [line.split() for line in owners if line] == [[d, "HwHiAiUser", "666"] for d in devices], node


def log_order(cluster: Cluster, node: str, *messages: str) -> list[int]:
    """Positions in the node's install log of the first line containing each message, after ``since``."""
    entries = parse_install_log(sh(cluster, node, f"cat {INSTALL_LOG}")).entries
    positions = []
    for message in messages:
        hits = [i for i, e in enumerate(entries) if message in f"[{e.component}] {e.message}"]
        assert hits, f"{node}: {message!r} not in {INSTALL_LOG}"
        positions.append(hits[-1])
    return positions


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


def image_problems(cluster: Cluster, node: str, stack: str) -> list[str]:
    """What the serving role's image-stack check says of ``stack``'s image on ``node``: the image
    ``provision image build`` labels for the node's NPU line (the role's default vllm_serve_image_soc),
    judged against the facts the role reads there (the ascend_facts probe: PCI line, driver)."""
    npus = facts_from_probe(sh(cluster, node, PROBE_SCRIPT))["ascend_npus"]
    target = Target(stack, soc=npus["line"])
    found = verdict(
        target.reference, target.labels(), host=node, driver=npus["driver_version"], line=npus["line"]
    )
    return found.problems


# -- fresh install -------------------------------------------------------------------------------------------


def test_fresh_install_reboots_passes_the_gate_and_reapplies_nothing(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """An Atlas A2 node and an Atlas A3 node: each fetches its own line's driver and firmware (the role
    reads the line from the node's PCI bus), installs driver then firmware, reboots once, passes the gate."""
    npus = 8
    cluster = sim_cluster_factory(
        "drv-new", nodes=2, os_list="openeuler-24.03,ubuntu-22.04", npus=npus, model_list="910B3,910_93"
    )
    inv = inventory(cluster, tmp_path)
    names = [node.name for node in cluster.nodes]
    driver, firmware = str(LOCKED["driver"]), str(LOCKED["firmware"])
    arch = sh(cluster, names[0], "uname -m").strip()
    lines = dict(zip(names, ("910b", "a3"), strict=True))
    chips_per_npu = dict(zip(names, (1, 2), strict=True))
    models = {name: model_for_line(line) for name, line in lines.items()}
    files = {
        name: [model.driver_file(driver, arch), model.firmware_file(firmware)]
        for name, model in models.items()
        if model is not None
    }
    assert files[names[1]] == [
        f"Atlas-A3-hdk-npu-driver_{driver}_linux-{arch}.run",
        f"Atlas-A3-hdk-npu-firmware_{firmware}.run",
    ]

    repos = provision("apply", inv, "repos")
    assert repos.rc == 0, repos.explain()

    # plan: the artifacts, the installers in order and the reboot, per host; nothing changes.
    before_boots = cluster.boots()
    before_ids = {name: boot_id(cluster, name) for name in names}
    plan = provision("plan", inv, "driver")
    assert plan.rc == 0, plan.explain()
    for name in names:
        changes = plan.tasks(name)
        downloads = [c for c in changes if c.startswith("ascend_driver : Would download ")]
        assert downloads == [f"ascend_driver : Would download {file}" for file in files[name]], changes
        runs = [c for c in changes if c.startswith("ascend_driver : Would run ")]
        assert runs == [f"ascend_driver : Would run {file}" for file in files[name]], changes
        assert REBOOT in changes
        assert not exists(cluster, name, "/usr/local/Ascend")
        assert not exists(cluster, name, "/var/cache/provision/ascend")
        assert "HwHiAiUser" not in sh(cluster, name, "cat /etc/passwd")
    assert cluster.boots() == before_boots

    # apply: driver then firmware, one reboot per node, the post-reboot gate passes.
    apply = provision("apply", inv, "driver")
    assert apply.rc == 0, apply.explain()
    assert cluster.boots() == {name: count + 1 for name, count in before_boots.items()}
    assert set(apply.events(POST_GATE)) == set(names)
    for name in names:
        assert boot_id(cluster, name) != before_ids[name]
        assert_driver_running(cluster, name, driver, firmware, npus, chips_per_npu[name])
        installed = log_order(
            cluster, name, "[Driver] Driver package installed", "[Firmware] Firmware package installed"
        )
        assert installed == sorted(installed), f"{name}: fresh install must be driver, then firmware"
        fact = json.loads(sh(cluster, name, f"cat {FACT}"))
        assert (fact["driver"]["version"], fact["firmware"]["version"]) == (driver, firmware)
        assert sh(cluster, name, "ls -A /var/cache/provision/ascend").strip() == ""

    again = provision("apply", inv, "driver")
    assert again.rc == 0, again.explain()
    assert again.changed() == dict.fromkeys(names, 0)
    assert cluster.boots() == {name: count + 1 for name, count in before_boots.items()}
    empty_plan = provision("plan", inv, "driver")
    assert empty_plan.summary["changes"] == []


# -- upgrade ------------------------------------------------------------------------------------------------


def test_stack_upgrade_0_18_to_0_23_goes_firmware_driver_cann_image_one_node_at_a_time(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """A site on the v0.18.0 stack (CANN 8.5.1) with an older HDK of that stack's lines (25.0.RC1: the A2's
    25.0.rc1.1, the A3's 25.0.rc1.3), an Atlas A2 node and an Atlas A3 node, upgrades to the default stack
    (v0.23.0: CANN 9.1.0 needs HDK 25.2 or later). The order: firmware then driver, one node at a time,
    each node rebooted and gated before the next; then CANN; then the serving image of the new stack, which
    fits the new driver and would have been refused on the old one. It ends healthy and on the lock."""
    npus = 2
    cluster = sim_cluster_factory(
        "drv-upg", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", npus=npus, model_list="910B3,910_93"
    )
    names = [node.name for node in cluster.nodes]
    lines = dict(zip(names, ("910b", "a3"), strict=True))
    chips_per_npu = dict(zip(names, (1, 2), strict=True))
    old, new = lock.stack(OLD_STACK), LOCKED
    # The old stack is selected, its HDK pinned per node inside the stack's lines: no unlock needed.
    inv = inventory(cluster, tmp_path, provision_stack=OLD_STACK)
    for name in names:
        driver, firmware = OLD_HDK[lines[name]]
        assert lock.hdk_matches(driver, old["hdk"]) and not lock.hdk_matches(driver, new["hdk"])
        host_vars(inv, name, {"ascend_driver_version": driver, "ascend_driver_firmware_version": firmware})
    assert provision("apply", inv, "repos").rc == 0

    # The older stack, installed with plain ansible-playbook (the playbooks need no provision).
    installed = ansible_playbook(inv, "driver", "cann")
    assert installed.returncode == 0, installed.stdout[-4000:]
    arch = sh(cluster, names[0], "uname -m").strip()
    for name in names:
        assert_driver_running(cluster, name, *OLD_HDK[lines[name]], npus, chips_per_npu[name])
        cann = json.loads(sh(cluster, name, f"cat {CANN_FACT}"))
        assert (cann["toolkit"], cann["ops"], cann["nnal"]) == (old["cann"], old["cann"], old["nnal"]), name
        model = model_for_line(lines[name])
        assert model is not None
        ops = model.cann_ops_file(str(old["cann"]), arch, new_layout=True)
        assert f"{ops.split('_')[0]} package installed successfully" in sh(
            cluster, name, f"cat {INSTALL_LOG}"
        )
    # The image step, judged before it is taken: the new stack's image (its tag from the stack and the node's
    # NPU line, as vllm_serve_image's default) does not fit the old driver; the old stack's image does.
    assert all(image_problems(cluster, name, OLD_STACK) == [] for name in names)
    refused = {name: image_problems(cluster, name, str(new["name"])) for name in names}
    for name, problems in refused.items():
        (problem,) = problems
        assert f"carries CANN {new['cann']} (stack {new['name']})" in problem, problem
        assert f"{name} runs NPU driver {OLD_HDK[lines[name]][0]}" in problem, problem
    before = cluster.boots()

    inventory(cluster, tmp_path)  # back to the default stack and its locked HDK
    for name in names:
        host_vars(inv, name, None)
    # The stack upgrade: driver and firmware one node at a time, then CANN.
    upgrade = provision("apply", inv, "driver", "-e", "ascend_driver_serial=1")
    assert upgrade.rc == 0, upgrade.explain()
    cann_run = provision("apply", inv, "cann")
    assert cann_run.rc == 0, cann_run.explain()
    driver, firmware = str(new["driver"]), str(new["firmware"])
    assert cluster.boots() == {name: count + 1 for name, count in before.items()}
    for name in names:
        assert_driver_running(cluster, name, driver, firmware, npus, chips_per_npu[name])
        old_install, fw_upgrade, drv_upgrade, toolkit, nnal = log_order(
            cluster,
            name,
            "[Driver] Driver package installed",
            "[Firmware] Firmware package upgraded",
            "[Driver] Driver package upgraded",
            f"[Toolkit] Install Ascend-cann-toolkit {new['cann']}",
            "[NNAL] Ascend-cann-nnal package installed",
        )
        assert old_install < fw_upgrade < drv_upgrade < toolkit < nnal, (
            f"{name}: an upgrade is firmware, then driver, then CANN"
        )
        cann = json.loads(sh(cluster, name, f"cat {CANN_FACT}"))
        assert (cann["toolkit"], cann["ops"], cann["nnal"]) == (new["cann"], new["cann"], new["nnal"]), name
        assert not exists(cluster, name, f"/usr/local/Ascend/cann-{old['cann']}"), name
        assert exists(cluster, name, f"/usr/local/Ascend/cann-{new['cann']}"), name
        env = sh(cluster, name, "bash -lc 'echo $ASCEND_TOOLKIT_HOME'").strip()
        assert env == "/usr/local/Ascend/cann"
    # ... and now the new stack's image fits every node.
    fits = {name: image_problems(cluster, name, str(new["name"])) for name in names}
    assert fits == {name: [] for name in names}, fits

    # Batches of one: each node rebooted and passed the post-reboot gate before the next one rebooted.
    reboots, gates = upgrade.events(REBOOT), upgrade.events(POST_GATE)
    assert set(reboots) == set(gates) == set(names)
    order = sorted(names, key=lambda host: when(reboots[host]["start"]))
    for first, second in itertools.pairwise(order):
        assert when(reboots[first]["end"]) <= when(gates[first]["end"]) <= when(reboots[second]["start"])

    for playbook in ("driver", "cann"):
        again = provision("apply", inv, playbook)
        assert again.rc == 0, again.explain()
        assert again.changed() == dict.fromkeys(names, 0), playbook
    report = provision("apply", inv, "report")
    assert report.rc == 0, report.explain()
    stack = (
        f"stack {new['name']}: driver {driver}, firmware {firmware}, CANN {new['cann']}, NNAL {new['nnal']}"
    )
    assert {
        h: r.get("msg") for h, r in report.results("Report the stack against the version lock").items()
    } == (dict.fromkeys(names, f"{stack}; matches the lock"))


# -- drills: each failure stops its node before any change; the others converge -----------------------------


def test_checksum_health_and_prerequisite_failures_stop_only_their_node(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """node1 converges (after the documented DKMS-residue fix); node2 has a wrong pinned checksum, node3 no
    prerequisites, node4 an unhealthy NPU while an upgrade is pending: each stops, untouched."""
    npus = 2
    cluster = sim_cluster_factory(
        "drv-bad",
        nodes=4,
        os_list="openeuler-22.03,ubuntu-22.04,openeuler-24.03,ubuntu-22.04",
        npus=npus,
    )
    inv = inventory(cluster, tmp_path)
    driver, firmware = str(LOCKED["driver"]), str(LOCKED["firmware"])
    arch = sh(cluster, "node1", "uname -m").strip()
    driver_file = f"Ascend-hdk-910b-npu-driver_{driver}_linux-{arch}.run"

    assert provision("apply", inv, "repos", "--limit", "node1,node2,node4").rc == 0
    host_vars(inv, "node4", OLD)
    old = provision("apply", inv, "driver", "--limit", "node4")
    assert old.rc == 0, old.explain()
    host_vars(inv, "node4", None)
    hardware.set_faults(cluster.node("node4").root, {"npu_health": {"1": "Critical"}})
    host_vars(inv, "node2", {"ascend_driver_checksums": {driver_file: "0" * 64}})
    sh(
        cluster,
        "node1",
        "mkdir -p /var/lib/dkms/davinci_ascend/1.0/build && echo old > /var/lib/dkms/davinci_ascend/1.0/x",
    )
    before = cluster.boots()

    run = provision("apply", inv, "driver")
    assert run.rc == 1, run.explain()
    failures = run.failures()
    assert sorted(failures) == ["node2", "node3", "node4"], run.explain()

    assert driver_file in failures["node2"]
    assert f"expected {'0' * 64} (pinned in ascend_driver_checksums)" in failures["node2"]
    assert "it is corrupted or not the vendor's file" in failures["node2"]
    assert "correct ascend_driver_checksums" in failures["node2"]
    assert "Nothing was installed on node2" in failures["node2"]

    assert (
        "lacks what the Ascend driver installer needs: lspci, ifconfig, dkms, gcc, make, kernel-headers"
        in failures["node3"]
    )
    assert "playbooks/repos.yml" in failures["node3"]
    assert "Nothing was changed on this node" in failures["node3"]

    assert "unhealthy NPUs: NPU 1 Critical" in failures["node4"]
    assert "ascend_driver_force: true" in failures["node4"]

    # The failed nodes: no install, no user, no reboot; node4 still runs its old driver.
    for name in ("node2", "node3"):
        assert not exists(cluster, name, "/usr/local/Ascend/driver"), name
        assert "HwHiAiUser" not in sh(cluster, name, "cat /etc/passwd"), name
        assert not exists(cluster, name, f"/var/cache/provision/ascend/{driver_file}"), name
    assert not exists(cluster, "node3", "/var/cache/provision/ascend")
    assert version_info(cluster, "node4", "driver") == OLD["ascend_driver_version"]
    assert not exists(cluster, "node4", f"/var/cache/provision/ascend/{driver_file}")
    assert {name: cluster.boots()[name] for name in ("node2", "node3", "node4")} == {
        name: before[name] for name in ("node2", "node3", "node4")
    }

    # node1 converged: the DKMS residue was removed (the documented fix) and the install retried once.
    assert run.changed()["node1"] > 0 and cluster.boots()["node1"] == before["node1"] + 1
    assert any("Remove the DKMS residue" in task for task in run.tasks("node1")), run.tasks("node1")
    assert_driver_running(cluster, "node1", driver, firmware, npus)

    # Forced past the health gate, node4 upgrades, reboots, and the post-reboot gate still reports the NPU.
    forced = provision("apply", inv, "driver", "--limit", "node4", "-e", "ascend_driver_force=true")
    assert forced.rc == 1, forced.explain()
    message = forced.failures()["node4"]
    assert message.startswith(POST_GATE), message
    assert f"loaded driver {driver} (wanted {driver})" in message
    assert "'1': 'Critical'" in message
    assert cluster.boots()["node4"] == before["node4"] + 1

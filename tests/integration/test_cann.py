"""The cann role on simulated nodes: both package layouts, login-shell environment, upgrade, idempotence.

One small cluster of its own (the session cluster stays untouched): node1 gets the locked CANN (>= 8.5
layout: ``cann-<v>``, ``Ascend-cann-910b-ops``), node2 first the older 8.2.RC1 (<= 8.3 layout:
``ascend-toolkit/<v>``, ``Ascend-cann-kernels-910b``) and is then upgraded to the locked one. The CANN
installers need no driver, so no prerequisite packages and no reboot are involved.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from provision.ascend import lock, parse_cann_install_info
from provision_sim.cluster import Cluster
from tests.helpers import copy_inventory, exists, host_vars, mirror_vars, provision, sh

pytestmark = pytest.mark.cluster

ClusterFactory = Callable[..., Cluster]
CANN = str(lock.default_stack()["cann"])
NNAL = str(lock.default_stack()["nnal"])
OLD = "8.2.RC1"
BASE = "/usr/local/Ascend"


def login_env(cluster: Cluster, node: str) -> list[str]:
    """What a login shell gets from /etc/profile.d/ascend.sh."""
    return sh(cluster, node, "bash -lc 'echo $ASCEND_TOOLKIT_HOME; echo $ATB_HOME_PATH'").split()


def toolkit_version(cluster: Cluster, node: str, info: str) -> str:
    return parse_cann_install_info(sh(cluster, node, f"cat {info}")).version


def test_both_layouts_then_upgrade(sim_cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    cluster = sim_cluster_factory("cann", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", npus=1)
    arch = sh(cluster, "node1", "uname -m").strip()
    inv = copy_inventory(cluster, tmp_path, mirror_vars(cluster))
    old_vars = {"cann_version": OLD, "cann_nnal_version": OLD, "provision_allow_unlocked_versions": True}
    host_vars(inv, "node2", old_vars)

    # plan: per host the downloads and the installers of its layout, in order; nothing changes.
    plan = provision("plan", inv, "-p", "cann")
    assert plan.rc == 0, plan.summary["failures"]
    expected = {
        "node1": [
            f"Ascend-cann-toolkit_{CANN}_linux-{arch}.run",
            f"Ascend-cann-910b-ops_{CANN}_linux-{arch}.run",
            f"Ascend-cann-nnal_{NNAL}_linux-{arch}.run",
        ],
        "node2": [
            f"Ascend-cann-toolkit_{OLD}_linux-{arch}.run",
            f"Ascend-cann-kernels-910b_{OLD}_linux-{arch}.run",
            f"Ascend-cann-nnal_{OLD}_linux-{arch}.run",
        ],
    }
    for node, files in expected.items():
        tasks = plan.tasks(node)
        downloads = [t for t in tasks if t.startswith("cann : Would download ")]
        assert downloads == [f"cann : Would download {f}" for f in files]
        assert [t for t in tasks if t.startswith("cann : Would run ")] == [
            f"cann : Would run {f}" for f in files
        ]
        assert not exists(cluster, node, BASE)
        assert not exists(cluster, node, "/etc/profile.d/ascend.sh")

    # apply: both layouts, their set_env.sh sourced by login shells, the versions recorded.
    first = provision("apply", inv, "-p", "cann")
    assert first.rc == 0, first.summary["failures"]
    assert (
        toolkit_version(cluster, "node1", f"{BASE}/cann-{CANN}/{arch}-linux/ascend_toolkit_install.info")
        == CANN
    )
    assert toolkit_version(cluster, "node1", f"{BASE}/cann/{arch}-linux/ascend_toolkit_install.info") == CANN
    assert exists(cluster, "node1", f"{BASE}/cann-{CANN}/{arch}-linux/ascend_ops_install.info")
    assert login_env(cluster, "node1") == [f"{BASE}/cann", f"{BASE}/nnal/atb/latest/atb/cxx_abi_1"]
    old_info = f"{BASE}/ascend-toolkit/{OLD}/{arch}-linux/ascend_toolkit_install.info"
    assert toolkit_version(cluster, "node2", old_info) == OLD
    assert exists(cluster, "node2", f"{BASE}/ascend-toolkit/{OLD}/{arch}-linux/ascend_kernels_install.info")
    assert login_env(cluster, "node2") == [
        f"{BASE}/ascend-toolkit/latest",
        f"{BASE}/nnal/atb/latest/atb/cxx_abi_1",
    ]
    facts = {
        node: json.loads(sh(cluster, node, "cat /etc/ansible/facts.d/cann.fact"))
        for node in ("node1", "node2")
    }
    assert facts["node1"] == {
        "toolkit": CANN,
        "ops": CANN,
        "ops_package": "ops",
        "nnal": NNAL,
        "home": f"{BASE}/cann-{CANN}",
        "set_env": f"{BASE}/cann/set_env.sh",
    }
    assert (facts["node2"]["toolkit"], facts["node2"]["ops_package"]) == (OLD, "kernels")
    for node in ("node1", "node2"):
        assert sh(cluster, node, "ls -A /var/cache/provision/cann").strip() == ""

    again = provision("apply", inv, "-p", "cann")
    assert again.rc == 0, again.summary["failures"]
    assert again.changed() == {"node1": 0, "node2": 0}

    # upgrade node2 to the lock: toolkit --upgrade replaces the <= 8.3 layout; node1 is left alone.
    host_vars(inv, "node2", None)
    upgrade = provision("apply", inv, "-p", "cann")
    assert upgrade.rc == 0, upgrade.summary["failures"]
    assert upgrade.tasks("node1") == []
    assert f"cann : Run Ascend-cann-toolkit_{CANN}_linux-{arch}.run" in upgrade.tasks("node2")
    assert not exists(cluster, "node2", f"{BASE}/ascend-toolkit")
    assert toolkit_version(cluster, "node2", f"{BASE}/cann/{arch}-linux/ascend_toolkit_install.info") == CANN
    assert login_env(cluster, "node2") == [f"{BASE}/cann", f"{BASE}/nnal/atb/latest/atb/cxx_abi_1"]
    assert sh(cluster, "node2", f"readlink {BASE}/nnal/atb/latest").strip() == NNAL
    log = sh(cluster, "node2", "cat /var/log/ascend_seclog/ascend_install.log")
    assert f"Remove the old version {OLD}" in log

    last = provision("apply", inv, "-p", "cann")
    assert last.rc == 0, last.summary["failures"]
    assert last.changed() == {"node1": 0, "node2": 0}
    converged = provision("plan", inv, "-p", "cann")
    assert (converged.rc, converged.summary["changes"]) == (0, [])

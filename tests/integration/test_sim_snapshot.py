"""`provision sim snapshot` and `sim up --from-snapshot`: one converged node stamped onto a fleet.

One test, end to end: a one-node cluster (openEuler 22.03) converges site.yml from bare, its node is kept as a
snapshot and the cluster goes; three nodes are stamped from the snapshot. Each must be a *converged* node with
its *own* identity:
- the first `provision apply` finds no record on them (the snapshot leaves the source's out), runs site.yml,
  which changes nothing on any of them, and records each; the next apply verifies all three against their
  records and runs no role (the records path, unchanged: same comparison, same health gate);
- host keys (checked by every SSH connection of those applies) and machine-ids differ from node to node and
  from the source node's; hostnames and NPU serials are each node's own (serials derive from the node's
  number, as on any simulated cluster).
Cost: 40-55 s in all on 2 shared cores (load 3-6): the seed's converge from bare, the stamped fleet and
its two applies.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provision_sim.cluster import Cluster
from tests.helpers import provision

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ClusterFactory = Callable[..., Cluster]


def identity(cluster: Cluster, node: str) -> tuple[str, str, str]:
    machine_id = cluster.exec(node, ["cat", "/etc/machine-id"]).stdout.strip()
    hostname = cluster.exec(node, ["hostname"]).stdout.strip()
    hardware = json.loads(cluster.exec(node, ["cat", "/etc/provision-sim/hardware.json"]).stdout)
    return machine_id, hostname, str(hardware["npus"][0]["serial"])


def test_nodes_stamped_from_a_snapshot_are_converged_each_with_its_own_identity(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    seed = sim_cluster_factory("seed", nodes=1, os_list="openeuler-22.03")
    converged = provision("apply", seed.inventory_path)
    assert converged.rc == 0, converged.explain()
    assert converged.summary["recorded"] == ["node1"]
    seed_key = seed.known_hosts.read_text().split()[2]
    seed_identity = identity(seed, "node1")
    snap = seed.snapshot("node1", tmp_path / "oe")
    # booted again after the copy: the snapshot starts it and returns; on a loaded machine it may still be
    # booting for a while
    deadline = time.monotonic() + 180
    while seed.status()[0].state == "booting" and time.monotonic() < deadline:
        time.sleep(2)
    assert seed.status()[0].state == "running"
    seed.down()

    fleet = sim_cluster_factory("stamped", nodes=3, os_list="openeuler-22.03", snapshots=[snap])
    names = ["node1", "node2", "node3"]
    assert [n.flavour for n in fleet.nodes] == ["openeuler-22.03"] * 3
    assert fleet.subnet.index == snap.subnet

    first = provision("apply", fleet.inventory_path)
    assert first.rc == 0, first.explain()
    assert first.changed() == dict.fromkeys(names, 0), first.explain()
    assert first.summary["drift"] == {n: ["no record of a converged apply on this node"] for n in names}
    assert first.summary["recorded"] == names
    # validate judged every variable (no template, no -e): the roles did not check their arguments again
    actions = {
        event["event_data"].get("task_action")
        for path in Path(first.summary["run_dir"]).glob("artifacts/*/job_events/*.json")
        if (event := json.loads(path.read_text())).get("event") == "runner_on_ok"
    }
    assert "provision.ascend.ascend_state" in actions
    assert "ansible.builtin.validate_argument_spec" not in actions

    again = provision("apply", fleet.inventory_path)
    assert again.rc == 0, again.explain()
    assert sorted(again.summary["verified"]) == names, again.explain()
    assert again.summary["drift"] == {}
    # The check ran in provision's process: its events are kept, and no ansible-playbook command line is.
    checked = Path(again.summary["run_dir"])
    assert checked.name.endswith("-verify") and list(checked.glob("artifacts/*/job_events/*.json"))
    assert not list(checked.glob("artifacts/*/command")), "the records check went through ansible-playbook"

    keys = [line.split()[2] for line in fleet.known_hosts.read_text().splitlines()]
    identities = [identity(fleet, name) for name in names]
    assert len(set(keys)) == 3 and seed_key not in keys
    assert [hostname for _, hostname, _ in identities] == names
    machine_ids = [machine_id for machine_id, _, _ in identities]
    assert len({*machine_ids, seed_identity[0]}) == 4, machine_ids
    # NPU serials derive from the node's number, as on any simulated cluster (the seed's node1 shares node1's)
    serials = [serial for _, _, serial in identities]
    assert len(set(serials)) == 3 and serials[0] == seed_identity[2], serials

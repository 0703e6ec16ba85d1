"""`Cluster.wait_ready(rebooted=...)`: a node asked to reboot counts as ready only once it booted again.

Until the old systemd has shut down, the old sshd still answers; a wait that only looked for sshd returned at
once and the next SSH command met the node mid-reboot ("Connection refused"). Here sshd always answers and the
supervisor writes the new boot count on its third look, as a slow shutdown under load would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import ProvisionError
from provision_sim import cluster as cluster_module
from provision_sim import nodes
from provision_sim.cluster import Cluster
from provision_sim.network import Subnet
from provision_sim.nodes import Node

pytestmark = pytest.mark.unit


class Supervisor:
    """Alive; on the ``reboot_at``-th look the node's next boot starts (its boots file is rewritten)."""

    def __init__(self, node: Node, reboot_at: int | None) -> None:
        self.node, self.reboot_at, self.looks = node, reboot_at, 0

    def alive(self) -> bool:
        self.looks += 1
        if self.looks == self.reboot_at:
            (self.node.dir / "boots").write_text(f"{self.node.boots + 1}\n")
        return True


def one_node_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reboot_at: int | None) -> Supervisor:
    node = Node("t", "node1", 1, "ubuntu-22.04", "10.200.9.11", 4, tmp_path / "node1")
    node.dir.mkdir()
    (node.dir / "boots").write_text("1\n")
    supervisor = Supervisor(node, reboot_at)
    monkeypatch.setattr(nodes, "ssh_ready", lambda _node, timeout=0.5: True)  # the old sshd still answers
    monkeypatch.setattr(nodes, "supervisor", lambda _node: supervisor)
    monkeypatch.setattr(cluster_module.time, "sleep", lambda _s: None)
    return supervisor


def cluster_of(supervisor: Supervisor, tmp_path: Path) -> Cluster:
    return Cluster("t", tmp_path, Subnet(9), tmp_path / "base", [supervisor.node])


def test_a_rebooted_node_is_ready_only_after_its_next_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = one_node_cluster(tmp_path, monkeypatch, reboot_at=3)
    cluster = cluster_of(supervisor, tmp_path)
    before = cluster.boots()
    assert before == {"node1": 1}
    cluster.wait_ready(timeout=60, rebooted=before)
    assert supervisor.looks == 3 and cluster.boots() == {"node1": 2}


def test_without_rebooted_an_answering_sshd_is_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = one_node_cluster(tmp_path, monkeypatch, reboot_at=None)
    cluster_of(supervisor, tmp_path).wait_ready(timeout=60)
    assert supervisor.looks == 0


def test_a_node_that_never_boots_again_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor = one_node_cluster(tmp_path, monkeypatch, reboot_at=None)
    cluster = cluster_of(supervisor, tmp_path)
    with pytest.raises(ProvisionError, match="node1"):
        cluster.wait_ready(timeout=0, rebooted=cluster.boots())

"""Snapshots of converged nodes (provision_sim.snapshot): what is kept, what is left out, how a stamped node's
root is layered, and the input errors of `provision sim up --from-snapshot`. The end to end proof (stamped
nodes converged, each with its own identity) is tests/integration/test_sim_snapshot.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.paths import RECORD_PATH
from provision_sim import cgroups, flavours, network, nodes, snapshot
from provision_sim.nodes import Node
from tests.helpers import PROVISION

pytestmark = pytest.mark.unit

BASE = Path("/var/cache/provision-sim/rootfs-test")


def meta(path: Path, **changes: object) -> snapshot.Snapshot:
    fields: dict[str, object] = {
        "path": path,
        "base": BASE,
        "subnet": 7,
        "flavour": "openeuler-22.03",
        "model": "910B3",
        "npus": 8,
        "source": "seed/node1",
        "taken_at": "2026-12-03T19:00:00Z",
    }
    fields.update(changes)
    return snapshot.Snapshot(**fields)  # type: ignore[arg-type]


def converged_upper(root: Path) -> tuple[Path, Path]:
    """A node's upper layer and data disks as a converge leaves them (a few files of each kind)."""
    upper, disks = root / "upper", root / "disks"
    files = {
        "usr/local/Ascend/driver/version.info": "Version=25.5.1\n",
        "etc/ascend_install.info": "Driver_Install_Path_Param=/usr/local/Ascend\n",
        RECORD_PATH.lstrip("/"): '{"fingerprint": "of node1"}\n',
        "var/log/journal/0123/system.journal": "journal",
        "root/.ansible/tmp/x": "tmp",
        "etc/hostname": "node1\n",
        "etc/machine-id": "0123\n",
        "etc/ssh/ssh_host_ed25519_key": "PRIVATE",
        "root/.ssh/authorized_keys": "ssh-ed25519 AAAA controller\n",
    }
    for path, content in files.items():
        (upper / path).parent.mkdir(parents=True, exist_ok=True)
        (upper / path).write_text(content)
    (upper / "etc/ascend_install.info").chmod(0o640)
    (disks / "var-lib-docker" / "image").mkdir(parents=True)
    (disks / "var-lib-docker" / "image" / "repositories.json").write_text("{}")
    return upper, disks


def test_take_keeps_the_converged_files_and_leaves_out_identity_and_record(tmp_path: Path) -> None:
    upper, disks = converged_upper(tmp_path / "node1")
    dest = tmp_path / "snaps" / "oe"
    snap = snapshot.take(node_upper=upper, node_disks=disks, dest=dest, meta=meta(dest))

    layer = snap.layer
    assert (layer / "usr/local/Ascend/driver/version.info").read_text() == "Version=25.5.1\n"
    assert stat.S_IMODE((layer / "etc/ascend_install.info").stat().st_mode) == 0o640
    assert (snap.disks / "var-lib-docker/image/repositories.json").read_text() == "{}"
    for left_out in snapshot.LEFT_OUT:
        assert not (layer / left_out.lstrip("/")).exists(), left_out
    assert json.loads((dest / "snapshot.json").read_text()) == {
        "format": 1,
        "base": str(BASE),
        "subnet": 7,
        "flavour": "openeuler-22.03",
        "model": "910B3",
        "npus": 8,
        "source": "seed/node1",
        "taken_at": "2026-12-03T19:00:00Z",
    }
    assert snapshot.load(dest) == snap
    assert not dest.with_name("oe.partial").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout is a 0/0 character device: mknod needs root")
def test_take_keeps_whiteouts_so_what_the_converge_removed_stays_removed(tmp_path: Path) -> None:
    upper, disks = converged_upper(tmp_path / "node1")
    lower = tmp_path / "base"
    (lower / "etc/yum.repos.d").mkdir(parents=True)
    (lower / "etc/yum.repos.d/stray.repo").write_text("[stray]\n")
    flavours.whiteout(upper, lower, "/etc/yum.repos.d/stray.repo")
    dest = tmp_path / "snap"
    snap = snapshot.take(node_upper=upper, node_disks=disks, dest=dest, meta=meta(dest))
    kept = (snap.layer / "etc/yum.repos.d/stray.repo").lstat()
    assert stat.S_ISCHR(kept.st_mode) and kept.st_rdev == os.makedev(0, 0)


def test_take_refuses_an_existing_folder(tmp_path: Path) -> None:
    upper, disks = converged_upper(tmp_path / "node1")
    dest = tmp_path / "snap"
    dest.mkdir()
    with pytest.raises(InputError, match=f"snapshot folder {dest} already exists"):
        snapshot.take(node_upper=upper, node_disks=disks, dest=dest, meta=meta(dest))


def write_snapshot(path: Path, **changes: object) -> Path:
    (path / "layer").mkdir(parents=True)
    data = {**meta(path).to_dict(), **changes}
    (path / "snapshot.json").write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no snapshot.json there"),
        ("{not json", "snapshot.json: not JSON"),
        (json.dumps({"format": 2}), "snapshot.json: field format: 1 expected"),
        (json.dumps({"format": 1, "base": "/b"}), "snapshot.json: field 'subnet' missing"),
    ],
)
def test_load_names_the_file_and_field(tmp_path: Path, content: str | None, message: str) -> None:
    (tmp_path / "layer").mkdir()
    if content is not None:
        (tmp_path / "snapshot.json").write_text(content)
    with pytest.raises(InputError, match=message):
        snapshot.load(tmp_path)


def test_load_refuses_an_unknown_flavour_and_a_missing_layer(tmp_path: Path) -> None:
    bad = write_snapshot(tmp_path / "a", flavour="windows-11")
    with pytest.raises(InputError, match="field flavour: unknown flavour 'windows-11'"):
        snapshot.load(bad)
    good = write_snapshot(tmp_path / "b")
    (good / "layer").rmdir()
    with pytest.raises(InputError, match="its layer/ folder is missing"):
        snapshot.load(good)


def test_a_list_of_snapshots_must_come_from_one_cluster(tmp_path: Path) -> None:
    one = write_snapshot(tmp_path / "oe")
    two = write_snapshot(tmp_path / "ub", flavour="ubuntu-22.04")
    other = write_snapshot(tmp_path / "elsewhere", subnet=9)
    assert [s.flavour for s in snapshot.parse_list(f"{one},{two}")] == ["openeuler-22.03", "ubuntu-22.04"]
    with pytest.raises(InputError, match=r"differ in subnet \(7, 9\)"):
        snapshot.parse_list(f"{one},{other}")
    with pytest.raises(InputError, match="taken on /var/cache/provision-sim/rootfs-test"):
        snapshot.check_base([snapshot.load(one)], Path("/var/cache/provision-sim/rootfs-new"))


def test_a_stamped_node_mounts_the_snapshot_between_its_own_layer_and_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(
        "c", "node3", 3, "openeuler-22.03", "10.200.7.13", 8, tmp_path / "node3", layers=("/s/layer",)
    )
    assert Node.from_dict("c", tmp_path, node.to_dict()) == Node(
        "c",
        "node3",
        3,
        "openeuler-22.03",
        "10.200.7.13",
        8,
        tmp_path / "nodes" / "node3",
        layers=("/s/layer",),
    )
    calls: list[list[str]] = []
    monkeypatch.setattr(nodes, "run", lambda argv, **_: calls.append(list(argv)))
    nodes.mount(node, Path("/base"))
    assert calls == [
        [
            "mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir=/s/layer:/base,upperdir={node.upper},workdir={node.work}", str(node.root),
        ]
    ]  # fmt: skip


def test_a_stamped_cluster_takes_the_snapshots_subnet_or_says_it_is_in_use() -> None:
    free = network.allocate_subnet(set()).index
    assert network.allocate_subnet(set(), wanted=free).index == free
    with pytest.raises(
        InputError, match=rf"subnet 10.200.{free}.0/24 is in use .* bring that one down first"
    ):
        network.allocate_subnet({free}, wanted=free)


def test_node_memory_reads_the_nodes_memory_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "memory.stat").write_text("cache 1\nrss 2\ntotal_cache 4096\ntotal_rss 8192\n")
    (v2 / "memory.stat").write_text("anon 100\nfile 200\n")
    monkeypatch.setattr(cgroups, "node_cgroups", lambda machine: [tmp_path / "none", v1])
    assert cgroups.memory("m") == (8192, 4096)
    monkeypatch.setattr(cgroups, "node_cgroups", lambda machine: [v2])
    assert cgroups.memory("m") == (100, 200)
    monkeypatch.setattr(cgroups, "node_cgroups", lambda machine: [tmp_path / "none"])
    assert cgroups.memory("m") is None


def test_cli_up_from_a_snapshot_refuses_os_and_a_missing_snapshot_before_anything(tmp_path: Path) -> None:
    snap = write_snapshot(tmp_path / "oe")
    env = {**os.environ, "PROVISION_SIM_DIR": str(tmp_path / "clusters")}
    sim_up = [*PROVISION, "sim", "up", "--name", "never"]
    done = subprocess.run(
        [*sim_up, "--from-snapshot", str(snap), "--os", "ubuntu-22.04"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "--from-snapshot takes OS, model and chip count from the snapshot: drop --os" in done.stderr
    done = subprocess.run(
        [*sim_up, "--from-snapshot", str(tmp_path / "nowhere")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2, done.stderr
    assert f"--from-snapshot {tmp_path / 'nowhere'}: no snapshot.json there" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "clusters").exists()

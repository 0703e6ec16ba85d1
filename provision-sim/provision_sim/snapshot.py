"""Snapshots of converged nodes: one node converged once, stamped onto many nodes with their own identity.

A fleet of 50 or 100 simulated nodes cannot be converged from bare on 2 cores in a useful time (drivers,
CANN, a container engine, reboots: minutes per node), and a benchmark of a no-op converge only needs nodes
that are *already* converged. ``provision sim snapshot NODE DEST`` powers a converged node off cleanly,
keeps its changes (the overlayfs upper layer and its data disks) in ``DEST``, and boots it again;
``provision sim up --from-snapshot DEST`` then mounts that layer read-only between every new node's own
layer and the base rootfs, so N nodes share one copy of the converged files (on disk and in the page cache).

What stays each node's own, written into its top layer as for any node (:func:`provision_sim.nodes.prepare`):
hostname, /etc/hosts, machine-id, ed25519 host key, the controller's authorized key, the simulated hardware
config (NPU serials derive from the node's number) and its data disks (a copy each: a container engine's
storage must be writable). Left out of the snapshot: the record of the last converged apply
(``/var/lib/provision/converged.json``: it describes the source node's inputs, whose address differs), the
journal (named by the old machine-id) and Ansible's temporary files. A stamped node therefore has no record:
the first ``provision apply`` compares, finds none, runs site.yml (which must change nothing: a test proves
it) and records each node as its own.

Inputs a converged node depends on that the snapshot keeps in ``snapshot.json``: the base rootfs it was
taken on, the cluster's subnet (the local mirror's URL, in the node's repository files, derives from it: a
stamped cluster takes the same subnet), the node's OS flavour, NPU model and chip count.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import InputError, ProvisionError
from provision.paths import RECORD_PATH
from provision_sim import flavours
from provision_sim.system import run

META = "snapshot.json"
LAYER = "layer"
DISKS = "disks"
FORMAT = 1
LEFT_OUT = (
    RECORD_PATH,
    "/var/log/journal",
    "/root/.ansible",
    "/etc/hostname",
    "/etc/hosts",
    "/etc/machine-id",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_ed25519_key.pub",
    "/root/.ssh/authorized_keys",
)
"""What of the source node is not stamped: its identity (each node writes its own), what names it."""


@dataclass(frozen=True)
class Snapshot:
    path: Path
    base: Path
    subnet: int
    flavour: str
    model: str
    npus: int
    source: str
    taken_at: str

    @property
    def layer(self) -> Path:
        return self.path / LAYER

    @property
    def disks(self) -> Path:
        return self.path / DISKS

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "base": str(self.base),
            "subnet": self.subnet,
            "flavour": self.flavour,
            "model": self.model,
            "npus": self.npus,
            "source": self.source,
            "taken_at": self.taken_at,
        }


def load(path: Path) -> Snapshot:
    """The snapshot at ``path``; an :class:`InputError` naming the file and field when it is not one."""
    meta = path / META
    try:
        data = json.loads(meta.read_text())
    except FileNotFoundError:
        hint = "take one with `provision sim snapshot`"
        raise InputError(f"--from-snapshot {path}: no {META} there ({hint})") from None
    except ValueError as exc:
        raise InputError(f"{meta}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InputError(f"{meta}: field format: {FORMAT} expected")
    try:
        snap = Snapshot(
            path=path,
            base=Path(str(data["base"])),
            subnet=int(data["subnet"]),
            flavour=str(data["flavour"]),
            model=str(data["model"]),
            npus=int(data["npus"]),
            source=str(data["source"]),
            taken_at=str(data["taken_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{meta}: field {exc} missing or not of its type") from None
    if snap.flavour not in flavours.FLAVOURS:
        raise InputError(f"{meta}: field flavour: unknown flavour {snap.flavour!r}")
    if not snap.layer.is_dir():
        raise InputError(f"--from-snapshot {path}: its {LAYER}/ folder is missing")
    return snap


def parse_list(spec: str) -> list[Snapshot]:
    """``DIR[,DIR...]`` → the snapshots, used in turn like ``--os``: one base, subnet and chip count."""
    snaps = [load(Path(word.strip())) for word in spec.split(",") if word.strip()]
    if not snaps:
        raise InputError("--from-snapshot: name at least one snapshot folder")
    for field_name in ("base", "subnet", "npus"):
        values = {str(getattr(s, field_name)) for s in snaps}
        if len(values) > 1:
            raise InputError(
                f"--from-snapshot: the snapshots differ in {field_name} ({', '.join(sorted(values))}): "
                "take them from one cluster"
            )
    return snaps


def take(*, node_upper: Path, node_disks: Path, dest: Path, meta: Snapshot) -> Snapshot:
    """Copy a stopped node's upper layer and data disks to ``dest`` (which must not exist), minus
    :data:`LEFT_OUT`. ``cp -a`` keeps owners, modes, xattrs (overlayfs' opaque folders) and whiteouts."""
    if dest.exists():
        raise InputError(f"snapshot folder {dest} already exists: remove it or choose another")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(mode=0o700)
    try:
        run(["cp", "-a", f"{node_upper}/.", str(partial / LAYER)])
        if node_disks.is_dir():
            run(["cp", "-a", f"{node_disks}/.", str(partial / DISKS)])
        for path in LEFT_OUT:
            target = partial / LAYER / path.lstrip("/")
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
        (partial / META).write_text(json.dumps(meta.to_dict(), indent=2) + "\n")
        partial.rename(dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return load(dest)


def stamp_disks(snap: Snapshot, node_disks: Path) -> None:
    """Give a node its own copy of the snapshot's data disks (a container engine writes its storage)."""
    if not snap.disks.is_dir():
        return
    node_disks.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", f"{snap.disks}/.", str(node_disks)])


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def size_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (``du``), for the snapshot's report."""
    result = run(["du", "-sb", str(path)], check=False)
    try:
        return int(result.stdout.split()[0])
    except (IndexError, ValueError):
        raise ProvisionError(f"du {path}: {result.stderr.strip()}") from None


def check_base(snaps: list[Snapshot], base: Path) -> None:
    if snaps and snaps[0].base != base:
        raise InputError(
            f"{snaps[0].path / META}: field base: taken on {snaps[0].base}, but nodes now boot from {base} "
            "(the simulator changed): converge a node and take the snapshot again"
        )

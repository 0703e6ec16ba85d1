"""One cgroup per node, so the nodes' systemds do not manage each other's units.

With ``--keep-unit`` systemd-nspawn hands the container the cgroup it was started in (split into
``supervisor/`` and ``payload/``). Started side by side from the same cgroup, every node's systemd would
create ``payload/system.slice/ssh.service`` in the *same* place: units fail to start ("Failed to attach to
cgroup") and a node's poweroff waits for processes of other nodes. So the supervisor starts each
systemd-nspawn in ``provision-sim/<machine>`` of every writable hierarchy (cgroup2, and the v1
``name=systemd`` one on hybrid hosts), as the host's systemd would do with a scope unit.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PARENT = "provision-sim"


def hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies systemd manages: cgroup2 and v1 ``name=systemd``."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _source, target, fstype, options, *_ = line.split()
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            found.append(Path(target))
    return found


def node_cgroups(machine: str) -> list[Path]:
    return [hierarchy / PARENT / machine for hierarchy in hierarchies()]


def join(machine: str) -> None:
    """Move the calling process into the node's cgroups (created as needed). Runs before exec of nspawn."""
    for attempt in range(3):
        try:
            for cgroup in node_cgroups(machine):
                cgroup.mkdir(parents=True, exist_ok=True)
                (cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
            return
        except FileNotFoundError:  # a concurrent `down` removed the empty parent meanwhile
            if attempt == 2:
                raise


def remove(machine: str) -> list[Path]:
    """Remove the node's (empty) cgroups, deepest first; returns those that could not be removed."""
    left = []
    for cgroup in node_cgroups(machine):
        if not cgroup.is_dir():
            continue
        for folder, _subfolders, _files in sorted(os.walk(cgroup), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        if cgroup.exists():
            left.append(cgroup)
        with contextlib.suppress(OSError):  # the shared parent, once no node uses it
            os.rmdir(cgroup.parent)
    return left

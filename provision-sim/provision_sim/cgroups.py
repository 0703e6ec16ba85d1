"""One cgroup per node, so the nodes' systemds do not manage each other's units.

With ``--keep-unit`` systemd-nspawn hands the container the cgroup it was started in (split into
``supervisor/`` and ``payload/``). Started side by side from the same cgroup, every node's systemd would
create ``payload/system.slice/ssh.service`` in the *same* place: units fail to start ("Failed to attach to
cgroup") and a node's poweroff waits for processes of other nodes. So the supervisor starts each
systemd-nspawn in ``provision-sim/<machine>`` of every writable hierarchy (cgroup2, and the v1
``name=systemd`` one on hybrid hosts), as the host's systemd would do with a scope unit.

On hybrid hosts (cgroup v1 controllers) systemd-nspawn shows the node its controllers read-only, and a
container engine inside the node cannot create its containers' cgroups (runc: "mkdir
/sys/fs/cgroup/cpuset/docker/...: read-only file system"). So the node also gets its own
``provision-sim/<machine>`` in every writable v1 controller hierarchy (cpuset initialised from the root),
bound writable into the node at :data:`NODE_BIND_DIR`; the node's ``provision-sim-cgroups.service`` mounts
them over ``/sys/fs/cgroup/<controller>`` early at boot (see :mod:`provision_sim.rootfs`), as a real
server's writable cgroups. The node's processes are in those cgroups too, so what the node sees as its root
is its own subtree.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

PARENT = "provision-sim"
NODE_BIND_DIR = "/var/lib/provision-sim/host-cgroup"
"""Where the node's writable v1 controller cgroups are bound inside it (before being mounted in place)."""


def hierarchies() -> list[Path]:
    """Mount points of the cgroup hierarchies systemd manages: cgroup2 and v1 ``name=systemd``."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _source, target, fstype, options, *_ = line.split()
        if fstype == "cgroup2" or (fstype == "cgroup" and "name=systemd" in options.split(",")):
            found.append(Path(target))
    return found


def controllers() -> list[Path]:
    """Mount points of the writable cgroup v1 controller hierarchies (none on a cgroup2-only host)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _source, target, fstype, options, *_ = line.split()
        flags = options.split(",")
        if fstype == "cgroup" and "rw" in flags and not any(f.startswith("name=") for f in flags):
            found.append(Path(target))
    return found


def node_cgroups(machine: str) -> list[Path]:
    return [hierarchy / PARENT / machine for hierarchy in (*hierarchies(), *controllers())]


def pids(machine: str) -> set[int]:
    """Every process in the node's cgroups (any depth, every hierarchy): what of the node still runs."""
    found: set[int] = set()
    for cgroup in node_cgroups(machine):
        for folder, _subfolders, _files in os.walk(cgroup):
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (Path(folder) / "cgroup.procs").read_text().split())
    return found


def node_binds(machine: str) -> list[str]:
    """systemd-nspawn ``--bind`` options giving the node its writable v1 controller cgroups."""
    return [
        f"--bind={controller / PARENT / machine}:{NODE_BIND_DIR}/{controller.name}"
        for controller in controllers()
    ]


def _init_cpuset(cgroup: Path) -> None:
    """A new v1 cpuset cgroup has no CPUs or memory nodes ("no space left on device" on join): inherit."""
    for folder in (cgroup.parent, cgroup):
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not (folder / name).read_text().strip():
                (folder / name).write_text((folder.parent / name).read_text())


def join(machine: str) -> None:
    """Move the calling process into the node's cgroups (created as needed). Runs before exec of nspawn."""
    for attempt in range(3):
        try:
            for cgroup in node_cgroups(machine):
                cgroup.mkdir(parents=True, exist_ok=True)
                if (cgroup / "cpuset.cpus").exists():
                    _init_cpuset(cgroup)
                (cgroup / "cgroup.procs").write_text(f"{os.getpid()}\n")
            return
        except FileNotFoundError:  # a concurrent `down` removed the empty parent meanwhile
            if attempt == 2:
                raise


def remove(machine: str, wait: float = 10.0) -> list[Path]:
    """Remove the node's cgroups, deepest first; returns those that could not be removed.

    A cgroup goes once it is empty. Processes SIGKILLed a moment ago (a node's vLLM engine freeing GiBs of
    memory on a loaded host) can take seconds to leave it, so this retries for up to ``wait`` seconds.
    """
    deadline = time.monotonic() + wait
    while True:
        left = _remove_once(machine)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def _remove_once(machine: str) -> list[Path]:
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


def memory(machine: str) -> tuple[int, int] | None:
    """(anonymous, page cache) bytes the node's processes hold, from its memory cgroup (v1 ``total_rss`` and
    ``total_cache``, or cgroup2 ``anon`` and ``file``); None where no memory controller accounts it. Cache
    of the shared base and snapshot layers is charged to the node that read it first."""
    for cgroup in node_cgroups(machine):
        try:
            text = (cgroup / "memory.stat").read_text()
        except OSError:
            continue
        stat = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                stat[name] = int(value)
        if "total_rss" in stat:
            return stat["total_rss"], stat.get("total_cache", 0)
        if "anon" in stat:
            return stat["anon"], stat.get("file", 0)
    return None

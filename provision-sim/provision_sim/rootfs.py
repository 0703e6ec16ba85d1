"""The base root filesystem every simulated node boots from, built once and cached.

Two cached artefacts under the cache folder (``/var/cache/provision-sim``, or ``$PROVISION_SIM_CACHE``):

``debian-bookworm-<key>.tar``
    The ``mmdebstrap`` output (≈ 30 s, ≈ 370 MB). ``<key>`` hashes the package list, so changing
    :data:`PACKAGES` builds a new one.
``rootfs-<key>/``
    The tar unpacked and prepared for booting as a node (:func:`prepare`), plus the simulated NPU tools
    of :mod:`provision_sim.hardware` when that package exists. ``<key>`` hashes the tar, this file's
    :data:`PREPARE_VERSION` and the hardware sources, so editing the simulator re-prepares (≈ 5 s) without
    re-downloading. Nodes mount it read-only as the lower layer of their overlayfs.

One base serves every flavour: dnf/rpm (openEuler) and apt (Ubuntu) are both installed, and each node hides
the package manager its distribution lacks (:mod:`provision_sim.flavours`). Measured: one base with dnf
costs ≈ 28 s and 370 MB, against ≈ 31 s + ≈ 31 s for two separate bases.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from provision.errors import EnvironmentProblem, ProvisionError
from provision_sim.cgroups import NODE_BIND_DIR
from provision_sim.system import locked

SUITE = "bookworm"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"

# No pciutils / net-tools: the simulated driver installer must find them missing until a role installs them.
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "sudo",
    "python3-apt",
    "python3-debian",
    "iproute2",
    "iputils-ping",
    "dnf",
    "python3-dnf",
    "rpm",
)

# Periodic jobs that would only compete for the CPU (or try the internet) during tests.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "fstrim.timer",
    "man-db.timer",
    "e2scrub_all.timer",
    "console-getty.service",
    "getty@tty1.service",
)

SSHD_CONFIG = """\
# Written by provision sim: each node has its own ed25519 host key, recorded by the controller at `up`.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
"""

# The node's own writable cgroup v1 controllers (bound in by systemd-nspawn, see provision_sim.cgroups)
# mounted where a container engine looks for them, before anything starts. Nothing on cgroup2-only hosts.
CGROUPS_UNIT_NAME = "provision-sim-cgroups.service"
CGROUPS_UNIT = f"""[Unit]
Description=Writable cgroup controllers for container engines (provision sim)
DefaultDependencies=no
ConditionDirectoryNotEmpty={NODE_BIND_DIR}
After=local-fs.target
Before=sysinit.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -ec 'for d in {NODE_BIND_DIR}/*; do mount --bind "$d" "/sys/fs/cgroup/$${{d##*/}}"; done'

[Install]
WantedBy=sysinit.target
"""

# Bump when prepare() changes what it writes, so cached rootfs folders are rebuilt.
PREPARE_VERSION = 2

DEFAULT_CACHE = Path("/var/cache/provision-sim")

Progress = Callable[[str], None]


def cache_dir() -> Path:
    return Path(os.environ.get("PROVISION_SIM_CACHE") or DEFAULT_CACHE)


def ensure_base(cache: Path | None = None, progress: Progress | None = None) -> Path:
    """The prepared base rootfs, built or re-prepared first when the cache lacks it."""
    cache = cache or cache_dir()
    say = progress or (lambda _text: None)
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache / ".lock"):  # two `up` at once must not build it twice
        tarball = cache / f"debian-{SUITE}-{_digest(SUITE, *PACKAGES)}.tar"
        if not tarball.exists():
            say(f"building the base rootfs with mmdebstrap (once, ≈ 30 s): {tarball}")
            _mmdebstrap(tarball)
        root = cache / f"rootfs-{_digest(tarball.name, str(PREPARE_VERSION), _hardware_digest())}"
        if not root.is_dir():
            say(f"preparing {root}")
            _unpack_and_prepare(tarball, root)
        _remove_stale(cache, keep={tarball, root})
        return root


def _mmdebstrap(tarball: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise EnvironmentProblem(
            "building the simulated nodes' base needs mmdebstrap: apt-get install mmdebstrap"
        )
    partial = tarball.with_name(tarball.name + ".partial")
    mirror = os.environ.get("PROVISION_SIM_DEBIAN_MIRROR") or DEFAULT_DEBIAN_MIRROR
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=apt",
        "--format=tar",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(partial),
        mirror,
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ProvisionError(f"mmdebstrap failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    partial.rename(tarball)


def _unpack_and_prepare(tarball: Path, root: Path) -> None:
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    subprocess.run(
        ["tar", "--extract", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-f", str(tarball)],
        cwd=partial,
        check=True,
    )
    prepare(partial)
    _install_hardware_tools(partial)
    partial.rename(root)


def prepare(root: Path) -> None:
    """Make a fresh Debian rootfs bootable as a node: no shared identity, no network, no periodic jobs."""
    # Identity comes per node (nodes.py): host keys, hostname, machine-id.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/provision-sim.conf").write_text(SSHD_CONFIG)
    (root / "etc/hostname").unlink(missing_ok=True)
    (root / "etc/machine-id").write_text("")
    # Air-gapped: no upstream package sources and no DNS; roles point nodes at the local mirror.
    (root / "etc/apt/sources.list").write_text(
        "# air-gapped simulated node: sources come from the local mirror\n"
    )
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    resolv.write_text("# no DNS on the simulated network; nodes know each other from /etc/hosts\n")
    # Debian's rpm keeps its database in ~/.rpmdb; openEuler's lives in /var/lib/rpm.
    (root / "etc/rpm").mkdir(exist_ok=True)
    (root / "etc/rpm/macros").write_text("%_dbpath /var/lib/rpm\n")
    (root / "var/lib/rpm").mkdir(exist_ok=True)
    (root / "etc/yum.repos.d").mkdir(exist_ok=True)
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "etc/systemd/system" / CGROUPS_UNIT_NAME).write_text(CGROUPS_UNIT)
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(exist_ok=True)
    (wants / CGROUPS_UNIT_NAME).unlink(missing_ok=True)
    (wants / CGROUPS_UNIT_NAME).symlink_to(f"/etc/systemd/system/{CGROUPS_UNIT_NAME}")


def _install_hardware_tools(root: Path) -> None:
    """Hand the rootfs to the simulated NPU hardware (``provision_sim.hardware``), if it is installed."""
    from provision_sim.nodes import hardware_module

    install: Callable[[Path], None] | None = getattr(hardware_module(), "install_tools", None)
    if install is not None:
        install(root)


def _hardware_digest() -> str:
    """A hash of the hardware simulator's sources: the rootfs is re-prepared when they change."""
    spec = importlib.util.find_spec("provision_sim.hardware")
    if spec is None:
        return "none"
    if spec.submodule_search_locations:
        folders = [Path(folder) for folder in spec.submodule_search_locations]
        files = [(f, path) for f in folders for path in sorted(f.rglob("*")) if path.is_file()]
    else:
        origin = Path(spec.origin or "")
        files = [(origin.parent, origin)] if origin.is_file() else []
    digest = hashlib.sha256()
    for folder, path in files:
        if "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _remove_stale(cache: Path, keep: set[Path]) -> None:
    """Delete cached artefacts other than ``keep``, except rootfs folders a running node still mounts."""
    mounts = Path("/proc/mounts").read_text()
    for path in cache.iterdir():
        if path in keep or path.name.startswith("."):
            continue
        if path.name.startswith("rootfs-") and f"lowerdir={path}" in mounts:
            continue
        if path.name.startswith(("rootfs-", "debian-")):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]

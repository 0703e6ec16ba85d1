"""OS flavours of simulated nodes: what makes a Debian bookworm rootfs look like openEuler or Ubuntu.

Every node boots the same Debian base (see :mod:`provision_sim.rootfs`). A flavour is a handful of files
written into the node's copy-on-write layer before boot:

- ``/etc/os-release`` (and ``/usr/lib/os-release``) of the real distribution, so ``ansible_facts`` report it;
- the package manager of the real distribution stays visible, the other one is hidden with an overlayfs
  whiteout: openEuler nodes have ``dnf``/``rpm`` but no ``apt-get``, Ubuntu nodes have ``apt`` but no ``dnf``.
  A role that calls the wrong package manager then fails here as it would on the real system. (Ansible
  alone would not need it: for os_family RedHat ``pkg_mgr`` is ``dnf`` whenever ``/usr/bin/dnf`` exists, and
  for Debian it is always ``apt``.) ``rpm`` keeps its database in ``/var/lib/rpm`` as on openEuler
  (``/etc/rpm/macros``; Debian's default is ``~/.rpmdb``), so ``ansible.builtin.dnf`` installs for real.

What Ansible (ansible-core 2.19) reports, checked by ``tests/integration/test_sim_cluster.py``:

==================  =======================  ================  ===============
flavour             ansible_distribution     ansible_os_family ansible_pkg_mgr
==================  =======================  ================  ===============
openeuler-22.03     openEuler (22.03)        RedHat            dnf
openeuler-24.03     openEuler (24.03)        RedHat            dnf
ubuntu-22.04        Ubuntu (22.04, jammy)    Debian            apt
==================  =======================  ================  ===============
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provision.errors import InputError


@dataclass(frozen=True)
class Flavour:
    """One simulated distribution: files to write and paths to hide in a node's upper layer."""

    key: str
    """The name users give to ``--os`` (``openeuler-22.03``)."""
    family: str
    """``openEuler`` or ``Ubuntu``."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Absolute path inside the node → text content."""
    symlinks: Mapping[str, str] = field(default_factory=dict)
    """Absolute path inside the node → link target."""
    hidden: tuple[str, ...] = ()
    """Absolute paths present in the Debian base that this distribution does not have."""


def _openeuler(version: str, service_pack: str) -> Flavour:
    pretty = f"openEuler {version} (LTS-{service_pack})"
    os_release = (
        'NAME="openEuler"\n'
        f'VERSION="{version} (LTS-{service_pack})"\n'
        'ID="openEuler"\n'
        f'VERSION_ID="{version}"\n'
        f'PRETTY_NAME="{pretty}"\n'
        'ANSI_COLOR="0;31"\n'
    )
    return Flavour(
        key=f"openeuler-{version}",
        family="openEuler",
        files={
            "/etc/os-release": os_release,
            "/usr/lib/os-release": os_release,
            "/etc/openEuler-release": f"openEuler release {version} (LTS-{service_pack})\n",
            # dnf cannot guess $releasever without an rpm providing system-release.
            "/etc/dnf/vars/releasever": f"{version}LTS_{service_pack.replace('-', '_')}\n",
        },
        symlinks={"/etc/system-release": "openEuler-release"},
        hidden=(
            "/etc/debian_version",
            "/usr/bin/apt",
            "/usr/bin/apt-cache",
            "/usr/bin/apt-cdrom",
            "/usr/bin/apt-config",
            "/usr/bin/apt-get",
            "/usr/bin/apt-key",
            "/usr/bin/apt-mark",
        ),
    )


def _ubuntu_2204() -> Flavour:
    os_release = (
        'PRETTY_NAME="Ubuntu 22.04.5 LTS"\n'
        'NAME="Ubuntu"\n'
        'VERSION_ID="22.04"\n'
        'VERSION="22.04.5 LTS (Jammy Jellyfish)"\n'
        "VERSION_CODENAME=jammy\n"
        "ID=ubuntu\n"
        "ID_LIKE=debian\n"
        'HOME_URL="https://www.ubuntu.com/"\n'
        'SUPPORT_URL="https://help.ubuntu.com/"\n'
        'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
        'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
        "UBUNTU_CODENAME=jammy\n"
    )
    return Flavour(
        key="ubuntu-22.04",
        family="Ubuntu",
        files={
            "/etc/os-release": os_release,
            "/usr/lib/os-release": os_release,
            "/etc/lsb-release": (
                "DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE=22.04\nDISTRIB_CODENAME=jammy\n"
                'DISTRIB_DESCRIPTION="Ubuntu 22.04.5 LTS"\n'
            ),
            "/etc/debian_version": "bookworm/sid\n",
        },
        hidden=("/usr/bin/dnf", "/usr/bin/dnf-3", "/usr/bin/rpm"),
    )


FLAVOURS: dict[str, Flavour] = {
    f.key: f for f in (_openeuler("22.03", "SP1"), _openeuler("24.03", "SP1"), _ubuntu_2204())
}
DEFAULT_FLAVOUR = "openeuler-22.03"


def parse_os_list(spec: str, count: int) -> list[Flavour]:
    """Flavours for ``count`` nodes from ``--os``: one name, or a comma list repeated in turn.

    ``openeuler-22.03,ubuntu-22.04`` for 3 nodes gives openEuler, Ubuntu, openEuler.
    """
    names = [part.strip().lower() for part in spec.split(",") if part.strip()]
    if not names:
        raise InputError(f"--os: no flavour given; choose from {', '.join(FLAVOURS)}")
    unknown = [name for name in names if name not in FLAVOURS]
    if unknown:
        raise InputError(f"--os: unknown flavour {', '.join(unknown)}; choose from {', '.join(FLAVOURS)}")
    if len(names) > count:
        raise InputError(f"--os lists {len(names)} flavours for {count} node(s)")
    return [FLAVOURS[names[i % len(names)]] for i in range(count)]


def apply_flavour(upper: Path, lower: Path, flavour: Flavour) -> None:
    """Write ``flavour`` into a node's overlayfs upper layer ``upper`` (``lower`` is the base rootfs)."""
    for path, content in flavour.files.items():
        target = in_layer(upper, lower, path)
        if target.is_symlink():
            target.unlink()
        target.write_text(content)
        target.chmod(0o644)
    for path, link in flavour.symlinks.items():
        target = in_layer(upper, lower, path)
        target.unlink(missing_ok=True)
        target.symlink_to(link)
    for path in flavour.hidden:
        if (lower / path.lstrip("/")).is_symlink() or (lower / path.lstrip("/")).exists():
            whiteout(upper, lower, path)


def whiteout(upper: Path, lower: Path, path: str) -> None:
    """Hide ``path`` of the lower layer: overlayfs shows nothing where the upper has a 0/0 char device."""
    target = in_layer(upper, lower, path)
    target.unlink(missing_ok=True)
    os.mknod(target, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def in_layer(upper: Path, lower: Path, path: str) -> Path:
    """``path`` inside the upper layer, its parent folders created with the lower layer's modes."""
    relative = Path(path.lstrip("/"))
    folder = upper
    for part in relative.parts[:-1]:
        folder = folder / part
        if not folder.is_dir():
            folder.mkdir()
            reference = lower / folder.relative_to(upper)
            folder.chmod(reference.stat().st_mode & 0o7777 if reference.is_dir() else 0o755)
    return upper / relative

"""The simulated cluster's local mirror: openEuler rpm repos, an Ubuntu apt repo, the vendor ``.run`` files.

An air-gapped site keeps one mirror of everything its nodes install. :func:`ensure_mirror` builds ours once
and caches it under the simulator's cache folder (``/var/cache/provision-sim/mirror-<key>``, ``<key>``
hashing :data:`CONTENT_VERSION`, the nodes' architecture and kernel, the locked versions, the simulated
installers' sources and this package's own code), laid out like the real mirrors::

    openeuler/openEuler-22.03-LTS-SP1/{OS,everything,update,EPOL/main}/<arch>/  createrepo_c metadata
              openEuler-24.03-LTS-SP1/...                                      (+ Packages/*.rpm)
              .../OS/<arch>/RPM-GPG-KEY-openEuler                              the rpms' signing key
    ubuntu/dists/{jammy,jammy-updates,jammy-security}/{main,restricted,universe,multiverse}/binary-<arch>/
          dists/<suite>/{Release,Release.gpg,InRelease}                         signed
          pool/main/*.deb
          provision-sim-archive-keyring.asc                                    the apt signing key
    ascend/*.run + sha256sums.txt             the CANN of every locked stack, its driver + an older one

``<arch>`` is the nodes' ``uname -m`` (the host's: nodes are containers), so on a Kunpeng host everything
is aarch64, as on the real racks. The rpms and debs hold what the Ascend driver installer checks for:

- ``pciutils`` (+ ``pciutils-libs``, ``hwdata``) and ``net-tools`` carry the REAL binaries of Debian's
  packages (the nodes are Debian bookworm underneath; the debs are fetched once with ``apt-get download``):
  ``lspci`` on a node reads the simulated PCI tree and lists the NPUs;
- node_exporter under each distribution's own name (:mod:`provision_sim.mirror.node_exporter`): Debian's
  ``prometheus-node-exporter`` deb as it is, and openEuler's ``golang-github-prometheus-node_exporter`` rpm
  layout around the same binary;
- ``dkms``, ``gcc``, ``make``, ``kernel-devel``/``kernel-headers`` (``linux-headers-<uname -r>`` on
  Ubuntu) and ``python3-devel`` (``python3-dev``) are small stand-ins providing the commands and folders
  the simulated installer looks for (``/usr/src/kernels/<uname -r>``, ``/lib/modules/<uname -r>/build``).

rpms are built with ``rpmbuild`` (``AutoReqProv: no``) and signed with ``rpmsign``; the apt ``Release``
files are signed with the same key (one GnuPG key, generated once per cache folder).

:func:`start_server` serves the mirror with ``python3 -m http.server`` inside the cluster's controller
namespace on the bridge address; :func:`group_vars` is what the cluster writes beside its inventory so
the roles use it. An air-gapped site sets the same variables to its own mirror.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

import yaml

from provision.ascend import files as ascend_files
from provision.ascend import lock
from provision.ascend.hardware import load_hardware
from provision.errors import EnvironmentProblem, ProvisionError
from provision_sim import images, rootfs
from provision_sim.mirror import node_exporter
from provision_sim.mirror import run_files as mirror
from provision_sim.mirror.exporter import build_exporter
from provision_sim.system import ProcessRef, locked, read_ref

CONTENT_VERSION = 5
"""Bump when what :func:`build_mirror` writes changes, so cached mirrors are rebuilt."""

OPENEULER_RELEASES = ("openEuler-22.03-LTS-SP1", "openEuler-24.03-LTS-SP1")
OPENEULER_SECTIONS = ("OS", "everything", "update", "EPOL/main")
UBUNTU_CODENAME = "jammy"
UBUNTU_SUITES = (UBUNTU_CODENAME, f"{UBUNTU_CODENAME}-updates", f"{UBUNTU_CODENAME}-security")
UBUNTU_COMPONENTS = ("main", "restricted", "universe", "multiverse")
DEBIAN_PACKAGES = ("pciutils", "libpci3", "pci.ids", "net-tools", "busybox-static", node_exporter.DEB)
"""Real Debian packages whose binaries the mirror's pciutils / net-tools / node_exporter (and the verification
image) hold."""
DOCKER_PACKAGE = "docker.io"
"""The container engine: Debian's package and its dependency closure not already in the node base."""
DOCKER_RPM = "docker-engine"
"""openEuler's docker package (src-openeuler/docker: ``Name: docker-engine``, ``Provides: docker``)."""
VERIFY_IMAGE = "provision-sim/busybox:1"
VERIFY_IMAGE_FILE = "busybox.tar"
"""The image of the container_runtime role's verification on the simulated cluster (mirror ``images/``)."""
IPTABLES_ALTERNATIVES = {
    name: f"{name.split('-')[0]}-nft{'-' + name.split('-')[1] if '-' in name else ''}"
    for name in (
        "iptables",
        "iptables-save",
        "iptables-restore",
        "ip6tables",
        "ip6tables-save",
        "ip6tables-restore",
    )
}
"""What Debian's iptables postinst links with update-alternatives (nft variants); the rpm has the links."""
DOCKER_POST = """\
getent group docker >/dev/null || groupadd --system docker
ldconfig
systemctl daemon-reload >/dev/null 2>&1 || :
systemctl enable docker >/dev/null 2>&1 || :
systemctl start docker >/dev/null 2>&1 || :
"""
"""openEuler's docker-engine %post: the docker group, ``systemctl enable docker; systemctl start docker``."""
POST_DIR = "/usr/libexec/provision-sim"
"""Where an rpm's %post shell script lives (run by a Lua scriptlet: see :func:`_rpmbuild`)."""

UPGRADE_SET = {"driver": "25.0.rc1.1", "firmware": "7.7.0.1.231", "cann": "8.2.RC1"}
"""An older driver/firmware/CANN set next to the locked one, for upgrade tests."""
UPGRADE_HDK = {"a3": {"driver": "25.0.rc1.3", "firmware": "7.7.0.3.228"}}
"""The older HDK release of the other NPU lines: Atlas A3's of HDK 25.0.RC1, ``Atlas-A3-hdk-npu-driver_
25.0.rc1.3_linux-aarch64.run`` and ``Atlas-A3-hdk-npu-firmware_7.7.0.3.228.run`` (the A3 install notes of
hicann repositories, [a3ops] in provision/data/hardware.yml). No public 300I Duo file name of an older
release is at hand: its line has the locked driver only."""

PORT = 8080
SERVER_READY_S = 10.0
KEY_UID = "provision sim mirror <mirror@provision-sim.invalid>"
RPM_KEY_NAME = "RPM-GPG-KEY-openEuler"
APT_KEY_NAME = "provision-sim-archive-keyring.asc"
HOST_TOOLS = {
    "rpmbuild": "rpm",
    "rpmsign": "rpm",
    "createrepo_c": "createrepo-c",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
    "gpg": "gnupg",
    "apt-get": "apt",
}

Progress = Callable[[str], None]


# ------------------------------------------------------------------------------------------------
# what goes into the mirror
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    """One package to build, for rpm (``rpm_name``) and/or deb (``deb_name``)."""

    summary: str
    version: str
    files: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """Path inside the node -> (content, mode)."""
    symlinks: Mapping[str, str] = field(default_factory=dict)
    debs: tuple[str, ...] = ()
    """Debian packages (of :data:`DEBIAN_PACKAGES` or the docker closure) whose files the rpm carries."""
    deb_files: Mapping[str, str] = field(default_factory=dict)
    """Path inside the node -> path inside ``debs``: when set, the rpm carries only these files of them."""
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    sections: tuple[str, ...] = ("OS", "everything")
    noarch: bool = False
    post: str = ""
    """An rpm ``%post`` scriptlet."""


def _script(text: str) -> tuple[str, int]:
    return (text, 0o755)


STAND_IN = "# provision sim stand-in: the simulated Ascend installer only checks that this exists.\n"


def _tool(name: str, version_line: str, extra: str = "") -> str:
    return (
        f"#!/bin/sh\n{STAND_IN}"
        'case "$1" in\n'
        f'  --version|-v|-V) echo "{version_line}" ;;\n'
        f"{extra}"
        f'  *) echo "{name}: stand-in of provision sim, nothing done: $*" >&2; exit 1 ;;\n'
        "esac\n"
    )


def rpm_packages(
    kernel: str, docker_debs: Mapping[str, str] | None = None, node_exporter_version: str | None = None
) -> dict[str, Package]:
    """The openEuler packages by rpm name (``kernel`` is the nodes' ``uname -r``).

    ``docker_debs`` (Debian package -> version, :func:`download_docker_debs`) adds ``docker-engine``: the
    Debian engine and everything the node base lacks for it (containerd, runc, tini, iptables, libraries),
    repacked like openEuler's package that bundles dockerd, containerd and runc. ``node_exporter_version``
    (of Debian's ``prometheus-node-exporter``) adds openEuler's node_exporter package around its binary.
    """
    name_devel, name_headers, kernel_version = _kernel_rpm_names(kernel)
    optional: dict[str, Package] = {}
    if node_exporter_version:
        optional[node_exporter.RPM] = node_exporter.rpm_package(node_exporter_version)
    if docker_debs:
        version = docker_debs.get(DOCKER_PACKAGE, "20.10").split(":")[-1].split("+")[0].split("-")[0]
        optional[DOCKER_RPM] = Package(
            "The open-source application container engine (Debian's docker.io and its dependencies)",
            version,
            debs=tuple(sorted(docker_debs)),
            symlinks={f"/usr/sbin/{name}": target for name, target in IPTABLES_ALTERNATIVES.items()},
            provides=("docker", f"docker = {version}"),
            sections=("everything",),
            post=DOCKER_POST,
        )
    return {
        **optional,
        "pciutils": Package(
            "PCI bus related utilities (binaries of Debian's pciutils)",
            "3.9.0",
            debs=("pciutils",),
            requires=("pciutils-libs", "hwdata"),
        ),
        "pciutils-libs": Package("Linux PCI library (Debian's libpci3)", "3.9.0", debs=("libpci3",)),
        "hwdata": Package(
            "Hardware identification data (Debian's pci.ids)", "0.369", debs=("pci.ids",), noarch=True
        ),
        "net-tools": Package("Basic networking tools (Debian's net-tools)", "2.10", debs=("net-tools",)),
        "dkms": Package(
            "Dynamic Kernel Module Support (stand-in)",
            "3.0.10",
            files={"/usr/sbin/dkms": _script(_tool("dkms", "dkms-3.0.10", "  status) exit 0 ;;\n"))},
            sections=("everything",),
            noarch=True,
        ),
        "gcc": Package(
            "GNU compiler (stand-in)",
            "12.3.1",
            files={
                "/usr/bin/gcc": _script(
                    _tool("gcc", "gcc (GCC) 12.3.1 (provision sim stand-in)", "  -dumpversion) echo 12 ;;\n")
                )
            },
        ),
        "make": Package(
            "GNU make (stand-in)",
            "4.3",
            files={"/usr/bin/make": _script(_tool("make", "GNU Make 4.3 (provision sim stand-in)"))},
        ),
        name_devel: Package(
            f"Development files for kernel {kernel} (stand-in)",
            kernel_version,
            files={
                f"/usr/src/kernels/{kernel}/Makefile": (f"{STAND_IN}KERNELRELEASE = {kernel}\n", 0o644),
                f"/usr/src/kernels/{kernel}/.config": (f"{STAND_IN}CONFIG_MODULES=y\n", 0o644),
            },
            provides=(f"kernel-devel = {kernel_version}",)
            + ((f"kernel-devel-uname-r = {kernel}",) if name_devel == "kernel-devel" else ()),
        ),
        name_headers: Package(
            f"Header files of kernel {kernel} (stand-in)",
            kernel_version,
            files={f"/usr/share/doc/kernel-headers-{kernel}/README": (STAND_IN, 0o644)},
            provides=(f"kernel-headers = {kernel_version}",),
        ),
        "python3-devel": Package(
            "Python 3 development files (stand-in)",
            "3.11.6",
            files={"/usr/share/doc/python3-devel/README": (STAND_IN, 0o644)},
        ),
    }


def deb_packages(kernel: str) -> dict[str, Package]:
    """The Ubuntu stand-in packages by deb name (the real ones come from :data:`DEBIAN_PACKAGES`)."""
    headers = f"/usr/src/linux-headers-{kernel}"
    return {
        "dkms": Package(
            "Dynamic Kernel Module Support (stand-in)",
            "2.8.7-2ubuntu2",
            files={"/usr/sbin/dkms": _script(_tool("dkms", "dkms-2.8.7", "  status) exit 0 ;;\n"))},
            noarch=True,
        ),
        "gcc": Package(
            "GNU C compiler (stand-in)",
            "4:11.2.0-1ubuntu1",
            files={
                "/usr/bin/gcc": _script(
                    _tool(
                        "gcc",
                        "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0 (provision sim stand-in)",
                        "  -dumpversion) echo 11 ;;\n",
                    )
                )
            },
        ),
        "make": Package(
            "GNU make (stand-in)",
            "4.3-4.1build1",
            files={"/usr/bin/make": _script(_tool("make", "GNU Make 4.3 (provision sim stand-in)"))},
        ),
        f"linux-headers-{kernel}": Package(
            f"Linux kernel headers for {kernel} (stand-in)",
            "1.0",
            files={
                f"{headers}/Makefile": (f"{STAND_IN}KERNELRELEASE = {kernel}\n", 0o644),
                f"{headers}/.config": (f"{STAND_IN}CONFIG_MODULES=y\n", 0o644),
            },
            symlinks={f"/lib/modules/{kernel}/build": headers},
        ),
        "python3-dev": Package(
            "header files and a static library for Python (stand-in)",
            "3.10.6-1~22.04",
            files={"/usr/share/doc/python3-dev/README.provision-sim": (STAND_IN, 0o644)},
            noarch=True,
        ),
    }


def _kernel_rpm_names(kernel: str) -> tuple[str, str, str]:
    """rpm names and version for ``kernel-devel``/``kernel-headers`` matching ``uname -r``.

    A real openEuler kernel (``5.10.0-136.12.0.86.oe2203sp1.aarch64``) is name ``kernel-devel``,
    version ``5.10.0``, release ``136.12.0.86.oe2203sp1``, so ``dnf install kernel-devel-$(uname -r)``
    matches its NEVRA. A release that cannot be an rpm version-release (this host's ``6.18.44-fc-v669``
    has two dashes) goes into the name instead, which ``dnf install kernel-devel-$(uname -r)`` matches too.
    """
    version, _, release = kernel.partition("-")
    for arch in ("x86_64", "aarch64"):
        release = release.removesuffix(f".{arch}")
    if release and "-" not in release and all(c.isalnum() or c in "._+~" for c in version + release):
        return "kernel-devel", "kernel-headers", f"{version}-{release}"
    return (
        f"kernel-devel-{kernel}",
        f"kernel-headers-{kernel}",
        version if version.replace(".", "").isdigit() else "0",
    )


# ------------------------------------------------------------------------------------------------
# the cache
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What the mirror is built for: the nodes' ``uname -m``, ``uname -r`` and Debian architecture."""

    arch: str
    kernel: str
    deb_arch: str

    @classmethod
    def host(cls) -> Target:
        deb_arch = subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
        ).stdout.strip()
        return cls(
            platform.machine(),
            platform.release(),
            deb_arch or {"aarch64": "arm64"}.get(platform.machine(), "amd64"),
        )


def ascend_sets() -> list[dict[str, str]]:
    """The vendor artifact sets: the default locked stack, then the older set for upgrades."""
    locked_stack = lock.default_stack()
    return [
        {
            "driver": str(locked_stack["driver"]),
            "firmware": str(locked_stack["firmware"]),
            "cann": str(locked_stack["cann"]),
            "nnal": str(locked_stack.get("nnal") or locked_stack["cann"]),
            "docker_runtime": str(locked_stack["docker_runtime"]),
        },
        {**UPGRADE_SET, "nnal": UPGRADE_SET["cann"]},
    ]


def stack_cann_sets() -> list[dict[str, str]]:
    """The CANN + NNAL of every other stack of the version lock (``provision_stack`` selects one): a site on
    an older stack installs its CANN from the mirror, and upgrades to the default one."""
    default = lock.default_stack_name()
    found: dict[tuple[str, str], dict[str, str]] = {}
    for name in lock.stack_names():
        entry = lock.stack(name)
        cann, nnal = str(entry["cann"]), str(entry.get("nnal") or entry["cann"])
        if name != default:
            found.setdefault((cann, nnal), {"cann": cann, "nnal": nnal})
    return list(found.values())


def cache_key(target: Target) -> str:
    digest = hashlib.sha256()
    digest.update(
        json.dumps(
            [
                CONTENT_VERSION,
                target.__dict__,
                ascend_sets(),
                UPGRADE_HDK,
                stack_cann_sets(),
                rootfs.PACKAGES,
            ],
            sort_keys=True,
        ).encode()
    )
    for name, data in mirror._engine_files():  # the .run payload: the simulated installers
        digest.update(name.encode())
        digest.update(data)
    # The code that writes the mirror: two branches that each bump CONTENT_VERSION to the same number must
    # still key different mirrors (a cached one without a package the other added was served as current).
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def ensure_mirror(
    cache: Path | None = None, progress: Progress | None = None, target: Target | None = None
) -> Path:
    """The mirror folder for this host's nodes, built first when the cache lacks it."""
    cache = cache or rootfs.cache_dir()
    target = target or Target.host()
    say = progress or (lambda _text: None)
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache / ".mirror.lock"):
        root = cache / f"mirror-{cache_key(target)}"
        if not root.is_dir():
            require_tools()
            say(f"building the local mirror (once): {root}")
            partial = root.with_name(root.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            try:
                debs = download_debs(cache, target)
                docker = download_docker_debs(cache, target, rootfs.ensure_base(cache, progress))
                build_mirror(
                    partial,
                    target=target,
                    debs=debs,
                    docker_debs=docker,
                    keyring=ensure_key(cache),
                    rpm_cache=cache,
                )
            except BaseException:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            partial.rename(root)
        _remove_stale(cache, keep=root)
        return root


def require_tools() -> None:
    missing = sorted({pkg for tool, pkg in HOST_TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise EnvironmentProblem(
            f"building the simulated cluster's local mirror needs {', '.join(missing)}: "
            f"apt-get install {' '.join(missing)}"
        )


def _remove_stale(cache: Path, keep: Path) -> None:
    """Older mirrors, unless a running cluster still serves them (its ``mirror.json`` names the folder)."""
    serving = {_served_root(path) for path in _server_records()}
    for path in cache.glob("mirror-*"):
        built = len(path.name) == len("mirror-") + 12 and not path.name.endswith(".partial")
        if built and path != keep and path.is_dir() and path not in serving:
            shutil.rmtree(path, ignore_errors=True)


def _server_records() -> list[Path]:
    from provision_sim.cluster import state_root

    return list(state_root().glob("*/mirror.json"))


def _served_root(record: Path) -> Path | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return Path(json.loads(record.read_text())["root"])
    return None


def download_debs(cache: Path, target: Target) -> dict[str, Path]:
    """:data:`DEBIAN_PACKAGES` for ``target``, fetched once with ``apt-get download`` and cached."""
    folder = cache / f"debs-{target.deb_arch}"
    found = _debs_in(folder)
    if all(name in found for name in DEBIAN_PACKAGES):
        return found
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        os.chmod(tmp, 0o755)  # apt's sandbox user writes there
        names = [f"{name}:{target.deb_arch}" if name != "pci.ids" else name for name in DEBIAN_PACKAGES]
        done = subprocess.run(
            ["apt-get", "download", "-q", *names], cwd=tmp, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise EnvironmentProblem(
                "the local mirror carries Debian's pciutils and net-tools; `apt-get download "
                f"{' '.join(names)}` failed (is a Debian mirror reachable, `apt-get update` done?):\n"
                f"{done.stderr.strip()[-2000:]}"
            )
        for deb in Path(tmp).glob("*.deb"):
            shutil.move(str(deb), folder / deb.name)
    found = _debs_in(folder)
    missing = [name for name in DEBIAN_PACKAGES if name not in found]
    if missing:
        raise ProvisionError(f"apt-get download did not give {missing} in {folder}")
    return found


def download_docker_debs(cache: Path, target: Target, base: Path) -> dict[str, Path]:
    """:data:`DOCKER_PACKAGE` and its dependency closure missing from the node base ``base`` (a rootfs).

    The closure is what ``apt-get install --no-install-recommends`` would add on top of the base's dpkg
    status (simulated on the host, against the host's Debian package lists); the debs are fetched once with
    ``apt-get download`` and cached in ``debs-<arch>/docker/`` with the list (``closure.txt``).
    """
    folder = cache / f"debs-{target.deb_arch}" / "docker"
    listing = folder / "closure.txt"
    if listing.is_file():
        wanted = dict(line.split(" ", 1) for line in listing.read_text().splitlines() if " " in line)
        found = _debs_in(folder)
        if wanted and all(name in found for name in wanted):
            return {name: found[name] for name in wanted}
    status = base / "var/lib/dpkg/status"
    simulated = subprocess.run(
        [
            "apt-get",
            "install",
            "-s",
            "-q",
            "--no-install-recommends",
            "-o",
            f"Dir::State::status={status}",
            "-o",
            f"APT::Architecture={target.deb_arch}",
            DOCKER_PACKAGE,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    closure = dict(re.findall(r"^Inst (\S+) \((\S+) ", simulated.stdout, re.MULTILINE))
    if simulated.returncode != 0 or DOCKER_PACKAGE not in closure:
        raise EnvironmentProblem(
            f"the local mirror carries Debian's {DOCKER_PACKAGE}; finding its dependencies with apt failed "
            "(is a Debian mirror reachable, `apt-get update` done?):\n"
            f"{(simulated.stderr or simulated.stdout)[-2000:]}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        os.chmod(tmp, 0o755)  # apt's sandbox user writes there
        names = [f"{name.split(':')[0]}={version}" for name, version in closure.items()]
        done = subprocess.run(
            ["apt-get", "download", "-q", *names], cwd=tmp, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise EnvironmentProblem(
                f"`apt-get download {' '.join(names)}` failed:\n{done.stderr.strip()[-2000:]}"
            )
        for deb in Path(tmp).glob("*.deb"):
            shutil.move(str(deb), folder / deb.name)
    found = _debs_in(folder)
    missing = [name for name in closure if name.split(":")[0] not in found]
    if missing:
        raise ProvisionError(f"apt-get download did not give {missing} in {folder}")
    listing.write_text("".join(f"{name.split(':')[0]} {version}\n" for name, version in closure.items()))
    return {name.split(":")[0]: found[name.split(":")[0]] for name in closure}


def _deb_versions(debs: Mapping[str, Path]) -> dict[str, str]:
    """Package -> version, from the file names (``name_version_arch.deb``, ``%3a`` = ``:``)."""
    return {name: path.name.split("_")[1].replace("%3a", ":") for name, path in debs.items()}


def _debs_in(folder: Path) -> dict[str, Path]:
    return {deb.name.split("_")[0]: deb for deb in sorted(folder.glob("*.deb"))} if folder.is_dir() else {}


def ensure_key(cache: Path) -> Path:
    """A GnuPG home holding the mirror's signing key (generated once per cache folder)."""
    home = cache / "gnupg-mirror"
    if (home / "ready").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(mode=0o700)
    _gpg(home, "--quick-generate-key", KEY_UID, "rsa2048", "sign", "never")
    (home / "ready").write_text("")
    return home


def _gpg(home: Path, *args: str, output: Path | None = None) -> None:
    argv = [
        "gpg",
        "--homedir",
        str(home),
        "--batch",
        "--yes",
        "--quiet",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
    ]
    if output is not None:
        argv += ["--output", str(output)]
    _run([*argv, *args])


def _run(argv: Sequence[str], *, cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ProvisionError(
            f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr.strip()[-3000:]}"
        )
    return done.stdout


# ------------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------------


def build_mirror(
    dest: Path,
    *,
    target: Target,
    debs: Mapping[str, Path],
    keyring: Path,
    docker_debs: Mapping[str, Path] | None = None,
    rpm_cache: Path | None = None,
) -> None:
    """Write the whole mirror tree into ``dest`` (module docstring); big rpms are kept in ``rpm_cache``."""
    dest.mkdir(parents=True)
    docker_debs = docker_debs or {}
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        work = Path(tmp)
        _gpg(keyring, "--armor", "--export", KEY_UID, output=work / "key.asc")
        rpms = build_rpms(
            work / "rpm", target=target, debs={**debs, **docker_debs}, keyring=keyring, cache=rpm_cache
        )
        _openeuler_tree(
            dest / "openeuler",
            target,
            rpms,
            work / "key.asc",
            _deb_versions(docker_debs),
            _deb_versions(debs).get(node_exporter.DEB),
        )
        stand_ins = build_debs(work / "deb", target=target)
        real = [debs[name] for name in DEBIAN_PACKAGES if name != "busybox-static"]
        _ubuntu_tree(dest / "ubuntu", target, [*real, *docker_debs.values(), *stand_ins], keyring)
        shutil.copy(work / "key.asc", dest / "ubuntu" / APT_KEY_NAME)
        if "busybox-static" in debs:
            _verify_image(dest / "images", debs["busybox-static"], target, work / "busybox")
    # Before the .run files: their sha256sums.txt lists the exporter too.
    build_exporter(dest / "ascend")
    for number, versions in enumerate(ascend_sets()):
        mirror.build_artifacts(
            dest / "ascend",
            arch=target.arch,
            driver=versions["driver"],
            firmware=versions["firmware"],
            cann=versions["cann"],
            nnal=versions["nnal"],
            docker_runtime=versions.get("docker_runtime", "26.1.0"),
            components=mirror.COMPONENTS
            if number == 0
            else [c for c in mirror.COMPONENTS if c != "docker-runtime"],
        )
    # The other NPU lines (A3, 300I Duo) get their own driver, firmware and operator package names, which
    # the roles fetch on a node whose PCI bus shows that line: the locked set, and the line's older HDK
    # release where one is known (an upgrade starts from it).
    locked_set = ascend_sets()[0]
    for line in sorted({m.base_image_tag for m in load_hardware().models.values()} - {"910b"}):
        sets = [(locked_set, ["driver", "firmware", "ops"])]
        if line in UPGRADE_HDK:
            sets.append(({**locked_set, **UPGRADE_HDK[line]}, ["driver", "firmware"]))
        for versions, components in sets:
            mirror.build_artifacts(
                dest / "ascend",
                arch=target.arch,
                driver=versions["driver"],
                firmware=versions["firmware"],
                cann=versions["cann"],
                nnal=versions["nnal"],
                components=components,
                line=line,
            )
    # The CANN of every other locked stack (toolkit and NNAL once, the operator package per line), so
    # `provision_stack: 0.18.0` converges on the sim and upgrades to the default stack from there.
    for versions in stack_cann_sets():
        for line in sorted({m.base_image_tag for m in load_hardware().models.values()}):
            mirror.build_artifacts(
                dest / "ascend",
                arch=target.arch,
                driver=locked_set["driver"],
                firmware=locked_set["firmware"],
                cann=versions["cann"],
                nnal=versions["nnal"],
                components=["toolkit", "ops", "nnal"] if line == "910b" else ["ops"],
                line=line,
            )


def _verify_image(folder: Path, busybox_deb: Path, target: Target, work: Path) -> None:
    """``images/busybox.tar`` (``docker save`` format, :data:`VERIFY_IMAGE`) and its ``sha256sums.txt``."""
    _run(["dpkg-deb", "-x", str(busybox_deb), str(work)])
    binary = next((p for p in (work / "bin/busybox", work / "usr/bin/busybox") if p.is_file()), None)
    if binary is None:
        raise ProvisionError(f"{busybox_deb.name} holds no bin/busybox")
    image = images.busybox_image(
        folder / VERIFY_IMAGE_FILE, binary.read_bytes(), VERIFY_IMAGE, machine=target.arch
    )
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    (folder / "sha256sums.txt").write_text(f"{digest}  {image.name}\n")


def build_rpms(
    work: Path, *, target: Target, debs: Mapping[str, Path], keyring: Path, cache: Path | None = None
) -> dict[str, Path]:
    """Every rpm of :func:`rpm_packages`, signed; rpm name -> file.

    The big ``docker-engine`` rpm (≈ 90 MB: repacking it is most of a mirror build) is kept in ``cache``
    (``rpms-<arch>/<key>/``, keyed by its package spec and the debs it repacks), so a mirror rebuilt for
    another reason (a changed simulator source) reuses it.
    """
    out: dict[str, Path] = {}
    docker = {name: path for name, path in debs.items() if name not in DEBIAN_PACKAGES}
    packages = rpm_packages(target.kernel, _deb_versions(docker), _deb_versions(debs).get(node_exporter.DEB))
    reused: dict[str, Path] = {}
    for name, package in packages.items():
        kept = _kept_rpm(cache, name, package, debs, target) if name == DOCKER_RPM else None
        if kept is not None and kept.is_dir() and len(list(kept.glob("*.rpm"))) == 1:
            reused[name] = next(kept.glob("*.rpm"))
            continue
        tree = work / "trees" / name
        package_tree(tree, name, package, debs)
        out[name] = _rpmbuild(work, name, package, tree, target)
        shutil.rmtree(tree)
    _rpmsign(keyring, out.values())
    for name, rpm in out.items():
        kept = _kept_rpm(cache, name, packages[name], debs, target)
        if kept is not None and name == DOCKER_RPM:
            partial = kept.with_name(kept.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            shutil.copy(rpm, partial / rpm.name)
            shutil.rmtree(kept, ignore_errors=True)
            partial.rename(kept)
            for older in kept.parent.glob(f"{name}-*"):
                if older != kept and not older.name.endswith(".partial"):
                    shutil.rmtree(older, ignore_errors=True)
    return {**out, **reused}


def package_tree(tree: Path, name: str, package: Package, debs: Mapping[str, Path]) -> None:
    """The files of rpm ``name`` in ``tree`` (created): its debs' files (only ``deb_files`` where set),
    then its own files, links and ``%post`` script."""
    tree.mkdir(parents=True)
    if package.deb_files:
        whole = tree.with_name(tree.name + ".debs")
        for deb in package.debs:
            _extract_deb(debs[deb], whole)
        for path, source in package.deb_files.items():
            found = whole / source.lstrip("/")
            if not found.is_file():
                raise ProvisionError(f"rpm {name}: {source} is in none of {', '.join(package.debs)}")
            dest = tree / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(found), dest)
        shutil.rmtree(whole)
    else:
        for deb in package.debs:
            _extract_deb(debs[deb], tree)
    _write_tree(tree, package, name)


def _kept_rpm(
    cache: Path | None, name: str, package: Package, debs: Mapping[str, Path], target: Target
) -> Path | None:
    if cache is None:
        return None
    key = hashlib.sha256(
        json.dumps(
            [CONTENT_VERSION, target.__dict__, repr(package), sorted(debs[d].name for d in package.debs)],
            sort_keys=True,
        ).encode()
    ).hexdigest()[:12]
    return cache / f"rpms-{target.deb_arch}" / f"{name}-{key}"


def _rpmsign(keyring: Path, rpms: Iterable[Path]) -> None:
    files = [str(p) for p in rpms]
    if not files:
        return
    _run(
        [
            "rpmsign",
            "--define",
            f"_gpg_name {KEY_UID}",
            "--define",
            f"_gpg_path {keyring}",
            "--define",
            f"__gpg {shutil.which('gpg') or 'gpg'}",
            "--addsign",
            *files,
        ]
    )


def _extract_deb(deb: Path, tree: Path) -> None:
    """A Debian package's files, moved to openEuler's merged-/usr paths, without its docs."""
    with tempfile.TemporaryDirectory() as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        root = Path(tmp)
        shutil.rmtree(root / "usr/share/doc", ignore_errors=True)
        shutil.rmtree(root / "usr/share/lintian", ignore_errors=True)
        for top in ("bin", "sbin", "lib"):
            if (root / top).is_dir() and not (root / top).is_symlink():
                _merge(root / top, root / "usr" / top)
        _merge(root, tree)


def _merge(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        target = dest / entry.name
        if entry.is_dir() and not entry.is_symlink():
            _merge(entry, target)
        else:
            target.unlink(missing_ok=True)
            shutil.move(str(entry), target)
    shutil.rmtree(src, ignore_errors=True)


def _write_tree(tree: Path, package: Package, name: str = "") -> None:
    if package.post:
        post = tree / POST_DIR.lstrip("/") / f"{name}.post"
        post.parent.mkdir(parents=True, exist_ok=True)
        post.write_text(package.post)
        post.chmod(0o644)
    for path, (content, mode) in package.files.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    for path, link in package.symlinks.items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(link)


def _rpmbuild(work: Path, name: str, package: Package, tree: Path, target: Target) -> Path:
    entries = sorted(
        "/" + str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_symlink() or not p.is_dir()
    )
    version, _, release = package.version.partition("-")
    lines = [
        f"Name: {name}",
        f"Version: {version}",
        f"Release: {release or '1.provision_sim'}",
        f"Summary: {package.summary}",
        "License: provision-sim",
        "AutoReqProv: no",
        *(f"Requires: {r}" for r in package.requires),
        *(f"Provides: {p}" for p in package.provides),
        *(["BuildArch: noarch"] if package.noarch else []),
        "%define debug_package %{nil}",
        "%define __os_install_post %{nil}",
        "%define _binary_payload w3.zstdio",
        "%description",
        f"{package.summary}. Built by provision sim for the simulated cluster's local mirror.",
        "%install",
        f"cp -a {tree}/. %{{buildroot}}/",
        # Lua, not sh: a shell scriptlet would require /bin/sh, which no rpm in the node's database provides.
        *(["%post -p <lua>", f'rpm.execute("/bin/sh", "{POST_DIR}/{name}.post")'] if package.post else []),
        "%files",
        *(f'"{entry}"' for entry in entries),
        "",
    ]
    spec = work / "specs" / f"{name}.spec"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text("\n".join(lines))
    top = work / "rpmbuild"
    _run(
        [
            "rpmbuild",
            "-bb",
            "--quiet",
            "--target",
            "noarch" if package.noarch else target.arch,
            "--define",
            f"_topdir {top}",
            "--define",
            "_build_id_links none",
            "--define",
            f"_dbpath {work / 'rpmdb'}",
            str(spec),
        ]
    )
    built = list((top / "RPMS").rglob(f"{name}-{version}-*.rpm"))
    if len(built) != 1:
        raise ProvisionError(f"rpmbuild of {name}: expected one rpm, found {built}")
    return built[0]


def _openeuler_tree(
    root: Path,
    target: Target,
    rpms: Mapping[str, Path],
    key: Path,
    docker: Mapping[str, str] | None = None,
    node_exporter_version: str | None = None,
) -> None:
    packages = rpm_packages(target.kernel, docker, node_exporter_version)
    for release in OPENEULER_RELEASES:
        for section in OPENEULER_SECTIONS:
            folder = root / release / section / target.arch
            (folder / "Packages").mkdir(parents=True)
            for name, rpm in rpms.items():
                if section in packages[name].sections:
                    os.link(rpm, folder / "Packages" / rpm.name)
            if section == "OS":
                shutil.copy(key, folder / RPM_KEY_NAME)
            _run(["createrepo_c", "--quiet", "--no-database", str(folder)])


def build_debs(work: Path, *, target: Target) -> list[Path]:
    """The Ubuntu stand-ins of :func:`deb_packages`, built with ``dpkg-deb``."""
    out = []
    for name, package in deb_packages(target.kernel).items():
        tree = work / name
        (tree / "DEBIAN").mkdir(parents=True)
        _write_tree(tree, package)
        arch = "all" if package.noarch else target.deb_arch
        (tree / "DEBIAN/control").write_text(
            f"Package: {name}\nVersion: {package.version}\nArchitecture: {arch}\n"
            "Maintainer: provision sim <mirror@provision-sim.invalid>\nSection: devel\nPriority: optional\n"
            f"Description: {package.summary}\n Built by provision sim for the simulated cluster's mirror.\n"
        )
        deb = work / f"{name}_{package.version.replace(':', '%3a')}_{arch}.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
        out.append(deb)
    return out


def _ubuntu_tree(root: Path, target: Target, debs: Iterable[Path], keyring: Path) -> None:
    pool = root / "pool" / "main"
    pool.mkdir(parents=True)
    for deb in debs:
        try:
            os.link(deb, pool / deb.name)
        except OSError:
            shutil.copy(deb, pool / deb.name)
    for suite in UBUNTU_SUITES:
        files = []
        for component in UBUNTU_COMPONENTS:
            folder = root / "dists" / suite / component / f"binary-{target.deb_arch}"
            folder.mkdir(parents=True)
            text = ""
            if suite == UBUNTU_CODENAME and component == "main":
                text = _run(["dpkg-scanpackages", "--multiversion", "pool/main", "/dev/null"], cwd=root)
            (folder / "Packages").write_text(text)
            (folder / "Packages.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
            (folder / "Release").write_text(
                f"Archive: {suite}\nComponent: {component}\nOrigin: provision-sim\nLabel: Ubuntu\n"
                f"Architecture: {target.deb_arch}\n"
            )
            files += [folder / "Packages", folder / "Packages.gz", folder / "Release"]
        suite_dir = root / "dists" / suite
        release = suite_dir / "Release"
        release.write_text(_release_file(suite, target.deb_arch, suite_dir, files))
        _gpg(keyring, "--local-user", KEY_UID, "--clearsign", str(release), output=suite_dir / "InRelease")
        _gpg(
            keyring,
            "--local-user",
            KEY_UID,
            "--armor",
            "--detach-sign",
            str(release),
            output=suite_dir / "Release.gpg",
        )


def _release_file(suite: str, arch: str, suite_dir: Path, files: Sequence[Path]) -> str:
    lines = [
        "Origin: provision-sim",
        "Label: Ubuntu",
        f"Suite: {suite}",
        "Version: 22.04",
        f"Codename: {UBUNTU_CODENAME}",
        f"Date: {formatdate(usegmt=True)}",
        f"Architectures: {arch}",
        f"Components: {' '.join(UBUNTU_COMPONENTS)}",
        "Description: Ubuntu Jammy 22.04 (local mirror of the simulated cluster)",
    ]
    for title, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{title}:")
        for path in files:
            data = path.read_bytes()
            lines.append(
                f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>8} {path.relative_to(suite_dir)}"
            )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# serving
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A running mirror server: where it serves from and the URL the nodes use."""

    root: Path
    ip: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.ip}:{self.port}"


def start_server(cluster_dir: Path, netns_path: Path, ip: str, root: Path, port: int = PORT) -> Served:
    """Serve ``root`` on ``ip:port`` in the namespace at ``netns_path``; record the PID in ``cluster_dir``."""
    log = cluster_dir / "mirror.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                "nsenter",
                f"--net={netns_path}",
                "--",
                sys.executable,
                "-m",
                "http.server",
                "--bind",
                ip,
                "--directory",
                str(root),
                str(port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            start_new_session=True,
        )
    ref = ProcessRef.of(process.pid)
    if ref is None:
        raise ProvisionError(f"the mirror server exited at once; see {log}")
    (cluster_dir / "mirror.pid").write_text(ref.dump())
    served = Served(root, ip, port)
    (cluster_dir / "mirror.json").write_text(
        json.dumps({"root": str(root), "ip": ip, "port": port, "url": served.url}, indent=2) + "\n"
    )
    deadline = time.monotonic() + SERVER_READY_S
    while True:
        with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=0.5):
            return served
        if process.poll() is not None or time.monotonic() > deadline:
            stop_server(cluster_dir)
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ProvisionError(f"the mirror server did not answer on {ip}:{port}:\n{tail}")
        time.sleep(0.05)


def stop_server(cluster_dir: Path, wait: float = 3.0) -> None:
    """Stop the server :func:`start_server` recorded (that PID only; nothing when none was started)."""
    pid_file = cluster_dir / "mirror.pid"
    ref = read_ref(pid_file)
    if ref is not None and ref.alive():
        ref.signal(signal.SIGTERM)
        deadline = time.monotonic() + wait
        while ref.alive() and time.monotonic() < deadline:
            ref.reap()
            time.sleep(0.02)
        if ref.alive():
            ref.signal(signal.SIGKILL)
            while ref.alive() and time.monotonic() < deadline + wait:
                ref.reap()
                time.sleep(0.02)
        ref.reap()
    pid_file.unlink(missing_ok=True)
    (cluster_dir / "mirror.json").unlink(missing_ok=True)


def served(cluster_dir: Path) -> Served | None:
    """The mirror a cluster serves, from its ``mirror.json`` (``None`` without one)."""
    try:
        data = json.loads((cluster_dir / "mirror.json").read_text())
        return Served(Path(data["root"]), str(data["ip"]), int(data["port"]))
    except (OSError, ValueError, KeyError):
        return None


def publish_file(
    mirror_root: Path, folder: str, source: Path, sha256: str, *, replaces: str | None = None
) -> str:
    """Make ``source`` part of the mirror at ``mirror_root`` as ``<folder>/<its name>``, listed in
    ``<folder>/sha256sums.txt`` (sha256sum format) beside it; returns its path below the mirror's URL.

    A hard link when both are on one file system, else a copy: files cached elsewhere (the model archive,
    the serving image) join the mirror on demand, and the mirror's cache key and build are untouched.
    ``replaces``: a glob of older files of ``folder`` this one supersedes (removed, with their lines).
    """
    dest_dir = Path(mirror_root) / folder
    dest_dir.mkdir(exist_ok=True)
    with locked(dest_dir / ".lock"):
        dest = dest_dir / source.name
        if not (dest.is_file() and _same_file(dest, source)):
            tmp = dest_dir / f".{dest.name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            try:
                os.link(source, tmp)
            except OSError:
                shutil.copyfile(source, tmp)
            tmp.replace(dest)
        sums = dest_dir / "sha256sums.txt"
        listed = read_sums(sums)
        stale = {path.name for path in dest_dir.glob(replaces)} - {dest.name} if replaces else set()
        for name in stale:
            (dest_dir / name).unlink(missing_ok=True)
        wanted = {name: sha for name, sha in listed.items() if name not in stale} | {dest.name: sha256}
        if wanted != listed:
            tmp_sums = sums.with_name(sums.name + ".tmp")
            tmp_sums.write_text("".join(f"{sha}  {name}\n" for name, sha in sorted(wanted.items())))
            tmp_sums.replace(sums)
    return f"{folder}/{dest.name}"


def read_sums(path: Path) -> dict[str, str]:
    """A ``sha256sums.txt``: file name -> sha256 (nothing when the file is missing)."""
    listed: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        fields = line.split()
        if len(fields) == 2:
            listed[fields[1].lstrip("*")] = fields[0]
    return listed


def _same_file(a: Path, b: Path) -> bool:
    first, second = a.stat(), b.stat()
    if (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino):
        return True
    return first.st_size == second.st_size and _file_sha256(a) == _file_sha256(b)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def own_pins(root: Path) -> dict[str, dict[str, str]]:
    """The simulator's own sha256 of every file of its mirror that the version lock pins, by the inventory
    variable that pins it (``ascend_driver_checksums``, ...).

    The lock pins the vendor's files by name; the simulator builds stand-ins under the same names, which can
    never have the vendor's sha256. The inventory's pin wins over the lock's, so the simulated cluster names
    its own, and only for the names the lock pins: every other file keeps the mirror's ``sha256sums.txt``.
    """
    pinned = lock.sha256_pins()
    pins: dict[str, dict[str, str]] = {}
    for name, sha in sorted(read_sums(root / "ascend" / "sha256sums.txt").items()):
        if name in pinned:
            pins.setdefault(ascend_files.pin_variable(name), {})[name] = sha
    return pins


def group_vars(url: str, root: Path | None = None) -> str:
    """Variables pointing the roles at the mirror served at ``url`` (``group_vars/npu_nodes.yml``); with the
    mirror's ``root``, the simulator's own sha256 of the files the version lock pins (:func:`own_pins`)."""
    pins = own_pins(root) if root is not None else {}
    own = (
        "# The lock pins the vendor's sha256 of these names; the simulator's files are its own builds.\n"
        + yaml.safe_dump(pins, default_flow_style=False, sort_keys=True)
        if pins
        else ""
    )
    return (
        "---\n"
        "# Written by `provision sim up`: packages and installers come from the cluster's local mirror,\n"
        "# as on an air-gapped site. Point these at your own mirror to do the same in production.\n"
        f"provision_mirror_url: {url}/ascend\n"
        f"openeuler_repos_mirror_url: {url}/openeuler\n"
        f"openeuler_repos_apt_mirror_url: {url}/ubuntu\n"
        f"openeuler_repos_apt_signed_by: {url}/ubuntu/{APT_KEY_NAME}\n"
        "# The nodes reach nothing but the mirror: no other repo file or apt source may stay enabled.\n"
        "openeuler_repos_disable_other_sources: true\n"
        "# No registry either: the container runtime's verification image is loaded from the mirror.\n"
        f"container_runtime_verify_image: {VERIFY_IMAGE}\n"
        f"container_runtime_verify_image_url: {url}/images/{VERIFY_IMAGE_FILE}\n" + own
    )

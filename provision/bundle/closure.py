"""``bundle build --resolve``: the OS packages the roles install, with their dependency closure, resolved
from the distributions' mirrors the inventory names, into repositories the bundle writes itself.

Which packages: what an apply installs on a node with nothing installed, read from the roles (one home):
``openeuler_repos_packages`` of ``roles/openeuler_repos/vars/<OS>.yml`` (``include_vars``: it outranks the
inventory) when ``openeuler_repos_install_packages``, the inventory's ``openeuler_repos_extra_packages``,
and the container engine (``container_runtime_engine_package``, else the role's ``vars/<OS>.yml``). The
kernel-named ones (``kernel-devel-{{ ansible_kernel }}``, ``linux-headers-{{ ansible_kernel }}``) take the
node's kernel from ``bootstrap_facts.kernel``, else ``--kernel``; a node without one is refused by name
before anything is fetched.

From where: the mirrors the nodes would use, ``openeuler_repos_mirror_url`` (every section of
``openeuler_repos_sections`` of the node's release) and ``openeuler_repos_apt_mirror_url`` (its suites and
``openeuler_repos_apt_components``), over http(s) or ``file://``.

How, with the distributions' own resolvers and none of the build machine's configuration:

- openEuler: ``dnf download --resolve --alldeps`` with an empty ``--installroot`` (so every dependency is
  taken, as on a node with nothing installed), its own ``--config``, ``reposdir``, ``varsdir`` and
  ``cachedir``, the sections as ``--repofrompath`` repositories, ``--forcearch``/``--releasever`` of the
  node. A first pass with ``--url`` says which section each package comes from; the second downloads
  into ``FILE.closure/`` (dnf skips what is already there: a rerun downloads nothing). Each section
  becomes a repository of its own packages (``createrepo_c``), so the nodes' repo files (one per section)
  all find metadata. The distribution's ``RPM-GPG-KEY-openEuler`` (``OS/<arch>/``) comes along: the
  packages keep their signatures and the nodes' ``gpgcheck`` checks them with it.
- Ubuntu: ``apt-get`` with its own ``Dir::Etc::sourcelist`` (the mirror's suites, checked against
  ``openeuler_repos_apt_signed_by`` as the nodes check them), an empty ``Dir::State::status`` (nothing
  installed), its own lists and cache, ``APT::Architecture`` of the node: ``update``, then
  ``install --print-uris --no-install-recommends`` (the roles install without recommends) for the
  closure with each file's SHA256, then ``apt-get download`` of what is not already there (checked
  against that SHA256). ``dpkg-scanpackages`` writes the first suite's ``Packages`` per component and
  architecture; the other suites the nodes list get empty indexes (apt needs every suite it is given).

The bundle then signs the repositories (:mod:`provision.bundle.repos`, as ``--sign-repos``): what it
writes is its own metadata, which no distribution key vouches for.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import httpx

from provision.bundle.needs import DEB_ARCHES, FLAVOURS, UBUNTU_CODENAMES, Plan, role_flag
from provision.errors import InputError
from provision.inventory.load import Inventory, plain
from provision.inventory.roles import role_os_vars, role_value

Say = Callable[[str], None]
_KERNEL = re.compile(r"\{\{\s*ansible_kernel\s*\}\}")
# The distributions' names as Ansible's ansible_distribution spells them (the roles' vars/ files).
_DISTRIBUTION = {"openEuler": "openEuler", "ubuntu": "Ubuntu"}
RPM_KEY_NAME = "RPM-GPG-KEY-openEuler"


@dataclass(slots=True)
class Group:
    """The nodes of one OS release and architecture that read the same mirror: one resolution."""

    flavour: str
    arch: str
    mirror: str
    packages: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    """openEuler: the repository sections; Ubuntu: the suites."""
    components: list[str] = field(default_factory=list)
    release: str = ""
    """openEuler: the release part of ``openEuler-<version>-<release>`` (from the mirror when empty)."""
    signed_by: str = ""
    """Ubuntu: the key the mirror's suites are checked against (a file or URL); empty: trusted."""
    gpgcheck: bool = True

    @property
    def os_id(self) -> str:
        return FLAVOURS[self.flavour][0]

    @property
    def version(self) -> str:
        return FLAVOURS[self.flavour][1]

    @property
    def name(self) -> str:
        return f"{self.flavour}-{self.arch}"

    @property
    def state(self) -> str:
        """Its folder of resolver state and downloads: one per release, architecture and mirror."""
        mirror = hashlib.sha256(self.mirror.encode()).hexdigest()[:8]
        return f"{self.name}{'-' + self.release if self.release else ''}-{mirror}"


# ------------------------------------------------------------------------------------------ which packages


def node_packages(host_vars: Mapping[str, Any], flavour: str, kernel: str | None) -> list[str]:
    """The packages an apply installs on a bare node (the roles' lists, the kernel's name filled in).

    :class:`KernelUnknown` when a package names the kernel and ``kernel`` is None; InputError for another
    template in a name.
    """
    os_id, version = FLAVOURS[flavour]
    distribution = _DISTRIBUTION[os_id]
    repos_vars = role_os_vars("openeuler_repos", distribution, version)
    wanted: list[str] = []
    if role_flag(host_vars, "openeuler_repos_install_packages", "openeuler_repos"):
        wanted += [str(name) for name in repos_vars.get("openeuler_repos_packages") or []]
    wanted += [
        str(name) for name in role_value(host_vars, "openeuler_repos_extra_packages", "openeuler_repos") or []
    ]
    engine = role_value(host_vars, "container_runtime_engine_package", "container_runtime") or role_os_vars(
        "container_runtime", distribution, version
    ).get("_container_runtime_engine_package")
    if engine:
        wanted.append(str(engine))
    resolved = []
    for name in dict.fromkeys(wanted):
        if _KERNEL.search(name):
            if kernel is None:
                raise KernelUnknown(name)
            name = _KERNEL.sub(kernel, name)
        if "{{" in name:
            raise InputError(f"package {name!r}: a template the build cannot fill in (only ansible_kernel)")
        resolved.append(name)
    return resolved


class KernelUnknown(Exception):
    """A package names the node's kernel, which the build was not told."""


def host_release(host_vars: Mapping[str, Any]) -> str:
    """The openEuler release part (``LTS-SP1``) of ``bootstrap_facts.os.pretty_name`` (``openEuler 22.03
    (LTS-SP1)``, os-release's PRETTY_NAME), which names the node's folder on the mirror; else ``""``."""
    facts = plain(host_vars.get("bootstrap_facts")) or {}
    os_facts = facts.get("os") or {} if isinstance(facts, Mapping) else {}
    match = re.search(r"\(([^()\s]+)\)\s*$", str(os_facts.get("pretty_name") or ""))
    return match.group(1) if match else ""


def host_kernel(host_vars: Mapping[str, Any]) -> str | None:
    facts = plain(host_vars.get("bootstrap_facts")) or {}
    kernel = facts.get("kernel") if isinstance(facts, Mapping) else None
    return str(kernel) if kernel else None


def groups(
    inventory: Inventory, plan: Plan, kernels: Mapping[str, str], releases: Mapping[str, str] | None = None
) -> list[Group]:
    """One :class:`Group` per OS release, architecture and mirror of the plan's nodes; InputError listing
    every host whose packages cannot be named (its kernel unknown) or whose mirror cannot be used.

    ``kernels``: host -> ``uname -r`` (key ``""``: every other host), for hosts without
    ``bootstrap_facts.kernel``; ``releases`` likewise the openEuler release part (``LTS-SP1``) for hosts
    without ``bootstrap_facts.os.pretty_name``.
    """
    releases = releases or {}
    problems: list[str] = []
    hosts = {node.host for node in plan.nodes}
    for option, given in (("--kernel", kernels), ("--openeuler-release", releases)):
        for name in sorted(set(given) - hosts - {""}):
            problems.append(f"{option} {name}={given[name]}: {name} is not a host of the inventory's nodes")
    found: dict[tuple[str, str, str, str], Group] = {}
    for node in plan.nodes:
        host_vars = inventory.hosts[node.host]
        kernel = kernels.get(node.host) or host_kernel(host_vars) or kernels.get("")
        try:
            packages = node_packages(host_vars, node.os, kernel)
        except KernelUnknown as exc:
            problems.append(
                f"{node.host}: package {exc} names the node's kernel, and the inventory has no "
                f"bootstrap_facts.kernel for it (provision bootstrap writes it): give --kernel "
                f"{node.host}=VERSION (uname -r on the node)"
            )
            continue
        except InputError as exc:
            problems.append(f"{node.host}: {exc}")
            continue
        os_id, version = FLAVOURS[node.os]
        gpgcheck = role_flag(host_vars, "openeuler_repos_gpgcheck", "openeuler_repos")
        if os_id == "openEuler":
            mirror = str(role_value(host_vars, "openeuler_repos_mirror_url", "openeuler_repos") or "")
            sections = [str(s) for s in role_value(host_vars, "openeuler_repos_sections", "openeuler_repos")]
            components: list[str] = []
            signed_by = ""
        else:
            mirror = str(
                role_value(host_vars, "openeuler_repos_apt_mirror_url", "openeuler_repos")
                or (  # the role's default, by architecture
                    "http://ports.ubuntu.com/ubuntu-ports"
                    if node.arch == "aarch64"
                    else "http://archive.ubuntu.com/ubuntu"
                )
            )
            codename = UBUNTU_CODENAMES[version]
            sections = [
                str(s)
                for s in role_value(host_vars, "openeuler_repos_apt_suites", "openeuler_repos")
                or [codename + suffix for suffix in ("", "-updates", "-security")]
            ]
            components = [
                str(c) for c in role_value(host_vars, "openeuler_repos_apt_components", "openeuler_repos")
            ]
            signed_by = str(role_value(host_vars, "openeuler_repos_apt_signed_by", "openeuler_repos") or "")
            if (
                gpgcheck
                and not signed_by.startswith(("http://", "https://"))
                and not Path(signed_by).is_file()
            ):
                problems.append(
                    f"{node.host}: openeuler_repos_apt_signed_by {signed_by!r}: no such file on this machine "
                    "(the build checks the mirror's suites with it, as the node does): give its URL or a "
                    "local copy"
                )
                continue
        if not mirror.startswith(("http://", "https://", "file://")):
            variable = (
                "openeuler_repos_mirror_url" if os_id == "openEuler" else "openeuler_repos_apt_mirror_url"
            )
            problems.append(f"{node.host}: {variable} {mirror!r}: not an http(s):// or file:// URL")
            continue
        release = ""
        if os_id == "openEuler":
            release = releases.get(node.host) or host_release(host_vars) or releases.get("", "")
        key = (node.os, node.arch, mirror.rstrip("/"), release)
        group = found.setdefault(
            key,
            Group(
                node.os,
                node.arch,
                mirror.rstrip("/"),
                sections=sections,
                components=components,
                release=release,
                signed_by=signed_by if gpgcheck else "",
                gpgcheck=gpgcheck,
            ),
        )
        group.hosts.append(node.host)
        group.packages += [name for name in packages if name not in group.packages]
    if problems:
        raise InputError(
            f"{inventory.source}: cannot name the OS packages to resolve:\n  " + "\n  ".join(problems)
        )
    return list(found.values())


# ------------------------------------------------------------------------------------------ resolve


@dataclass(frozen=True, slots=True)
class Package:
    path: str
    """In the bundle: ``openeuler/openEuler-22.03-LTS-SP1/OS/aarch64/Packages/x.rpm``, ``ubuntu/pool/...``."""
    origin: Path
    url: str
    version: str


@dataclass(slots=True)
class Resolved:
    """What the closures put into the bundle: files below ``tree`` (packages and metadata)."""

    tree: Path
    packages: list[Package] = field(default_factory=list)
    downloaded: int = 0


def closure_dir(output: Path) -> Path:
    """Where a build keeps what it downloaded (a rerun downloads only what is missing)."""
    return output.with_name(output.name + ".closure")


def check_tools(groups_: Sequence[Group]) -> None:
    needed = []
    if any(g.os_id == "openEuler" for g in groups_):
        needed += [
            ("dnf", "dnf and dnf-plugins-core (the download plugin)"),
            ("createrepo_c", "createrepo-c"),
        ]
    if any(g.os_id == "ubuntu" for g in groups_):
        needed += [("apt-get", "apt"), ("dpkg-scanpackages", "dpkg-dev")]
    missing = [f"{tool} (package {package})" for tool, package in needed if shutil.which(tool) is None]
    if missing:
        raise InputError("--resolve needs on this machine: " + ", ".join(missing))


def resolve(groups_: Sequence[Group], root: Path, say: Say) -> Resolved:
    """Resolve and download every group's closure below ``root``, write the repositories' metadata into
    ``root/tree`` (made anew: the packages hard-linked from the downloads)."""
    check_tools(groups_)
    tree = root / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    result = Resolved(tree)
    for group in groups_:
        hosts = ", ".join(group.hosts)
        say(f"resolving {len(group.packages)} packages for {hosts} ({group.name}) from {group.mirror}")
        if group.os_id == "openEuler":
            _rpm(group, root / "rpm" / group.state, result)
        else:
            _deb(group, root / "apt" / group.state, result)
    _rpm_metadata(tree)
    _deb_metadata(tree, groups_, result)
    return result


def _run(argv: Sequence[str], what: str, **kwargs: Any) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        # The resolvers' own words name the package: "nothing provides X needed by Y", "No package X
        # available", "Depends: X but it is not installable"; the progress lines are left out.
        useful = [
            line.strip()
            for line in lines
            if not line.startswith(
                ("Added ", "Last metadata", "Get:", "Hit:", "Ign:", "Reading ", "Building ")
            )
        ]
        raise InputError(f"{what}:\n    " + "\n    ".join(useful[-20:] or [f"exit {done.returncode}"]))
    return str(done.stdout)


# --- openEuler


def _openeuler_release(group: Group, client: httpx.Client | None) -> str:
    """The release folder the mirror has for the group's version: ``openEuler-22.03-LTS-SP1``."""
    prefix = f"openEuler-{group.version}-"
    if group.release:
        return prefix + group.release
    if group.mirror.startswith("file://"):
        base = Path(unquote(urlparse(group.mirror).path))
        names = sorted(p.name for p in base.glob(prefix + "*") if p.is_dir()) if base.is_dir() else []
    else:
        assert client is not None
        try:
            answer = client.get(group.mirror + "/")
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise InputError(f"{group.mirror}/: cannot list it: {exc}") from None
        names = sorted(
            {
                unquote(link).rstrip("/").rsplit("/", 1)[-1]
                for link in re.findall(r'href="([^"?#]+)"', answer.text)
            }
        )
        names = [name for name in names if name.startswith(prefix)]
    if len(names) != 1:
        raise InputError(
            f"{', '.join(group.hosts)}: openeuler_repos_mirror_url {group.mirror} has "
            f"{'no ' + prefix + '*' if not names else 'several releases: ' + ', '.join(names)}: "
            "the closure is resolved against the node's own: bootstrap_facts.os.pretty_name (which "
            "provision bootstrap writes) names it, openEuler 22.03 (LTS-SP1); else give "
            "--openeuler-release [HOST=]RELEASE"
        )
    return names[0]


def _rpm(group: Group, state: Path, result: Resolved) -> None:
    with httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=True) as client:
        release = _openeuler_release(group, client)
        key = _fetch(client, f"{group.mirror}/{release}/OS/{group.arch}/{RPM_KEY_NAME}")
    if key is None and group.gpgcheck:
        raise InputError(
            f"{', '.join(group.hosts)}: {group.mirror}/{release}/OS/{group.arch}/{RPM_KEY_NAME}: not on the "
            "mirror (the nodes check the packages with it: openeuler_repos_gpgcheck)"
        )
    for sub in ("root", "repos", "cache", "packages"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "dnf.conf").write_text("[main]\n")
    urls = {section: f"{group.mirror}/{release}/{section}/{group.arch}/" for section in group.sections}
    argv = [
        "dnf",
        "-y",
        "--config",
        str(state / "dnf.conf"),
        "--installroot",
        str((state / "root").resolve()),
        f"--setopt=reposdir={(state / 'repos').resolve()}",
        f"--setopt=varsdir={(state / 'repos').resolve()}",
        f"--setopt=cachedir={(state / 'cache').resolve()}",
        "--setopt=install_weak_deps=False",
        f"--releasever={group.version}",
        f"--forcearch={group.arch}",
        # dnf download checks no signature; the nodes' gpgcheck does, with the distribution's key.
        "--nogpgcheck",
        "--disableplugin=*",
        "--enableplugin=download",
        *[f"--repofrompath=provision-{_repo_id(section)},{url}" for section, url in urls.items()],
        "download",
        "--resolve",
        "--alldeps",
    ]
    what = f"dnf download --resolve --alldeps for {', '.join(group.hosts)} ({group.name}, {group.mirror})"
    listed = [line.strip() for line in _run([*argv, "--url", *group.packages], what).splitlines()]
    # A package several sections carry (the same file name) is listed once per section: the bundle keeps
    # it in the first section of openeuler_repos_sections' order that has it, as dnf's download does.
    by_name: dict[str, str] = {}
    for url in (line for line in listed if line.endswith(".rpm") and "://" in line):
        name = PurePosixPath(urlparse(url).path).name
        order = [i for i, base in enumerate(urls.values()) if url.startswith(base)]
        known = by_name.get(name)
        if known is None or order < [i for i, base in enumerate(urls.values()) if known.startswith(base)]:
            by_name[name] = url
    listed = sorted(by_name.values())
    before = {p.name for p in (state / "packages").iterdir()}
    _run([*argv, "--destdir", str((state / "packages").resolve()), *group.packages], what)
    for url in listed:
        name = PurePosixPath(urlparse(url).path).name
        section = next((s for s, base in urls.items() if url.startswith(base)), None)
        origin = state / "packages" / name
        if section is None or not origin.is_file():
            raise InputError(f"{what}: {url}: not downloaded into {state / 'packages'}")
        result.downloaded += name not in before
        rel = f"openeuler/{release}/{section}/{group.arch}/Packages/{name}"
        _link(origin, result.tree / rel)
        result.packages.append(Package(rel, origin, url, _rpm_version(name)))
    for section in group.sections:  # every section the nodes' repo files name gets a repository
        (result.tree / "openeuler" / release / section / group.arch / "Packages").mkdir(
            parents=True, exist_ok=True
        )
    if key is not None:
        dest = result.tree / "openeuler" / release / "OS" / group.arch / RPM_KEY_NAME
        dest.write_bytes(key)


def _repo_id(section: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", section)


def _rpm_version(name: str) -> str:
    """``kernel-devel-5.10.0-136.12.0.86.oe2203sp1.aarch64.rpm`` -> ``5.10.0-136.12.0.86.oe2203sp1``."""
    stem = name.removesuffix(".rpm").rsplit(".", 1)[0]
    parts = stem.rsplit("-", 2)
    return "-".join(parts[1:]) if len(parts) == 3 else stem


def _rpm_metadata(tree: Path) -> None:
    for packages in sorted((tree / "openeuler").glob("*/**/Packages")):
        _run(
            ["createrepo_c", "--quiet", "--no-database", str(packages.parent)],
            f"createrepo_c {packages.parent}",
        )


# --- Ubuntu


def _deb(group: Group, state: Path, result: Resolved) -> None:
    deb_arch = DEB_ARCHES[group.arch]
    for sub in ("lists/partial", "cache/archives/partial", "parts", "debs"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "status").write_text("")  # nothing installed: the closure is every dependency
    options = [f"arch={deb_arch}"]
    if not group.signed_by:
        options.append("trusted=yes")
    elif group.signed_by.startswith(("http://", "https://")):
        with httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=True) as client:
            data = _fetch(client, group.signed_by)
        if data is None:
            raise InputError(
                f"{', '.join(group.hosts)}: openeuler_repos_apt_signed_by {group.signed_by}: not found"
            )
        suffix = ".asc" if data.lstrip().startswith(b"-----BEGIN") else ".gpg"
        keyring = state / f"keyring{suffix}"
        keyring.write_bytes(data)
        options.append(f"signed-by={keyring.resolve()}")
    else:
        options.append(f"signed-by={Path(group.signed_by).resolve()}")
    (state / "sources.list").write_text(
        "".join(
            f"deb [{' '.join(options)}] {group.mirror} {suite} {' '.join(group.components)}\n"
            for suite in group.sections
        )
    )
    argv = [
        "apt-get",
        "-q",
        "-o", f"Dir::Etc::sourcelist={(state / 'sources.list').resolve()}",
        "-o", f"Dir::Etc::sourceparts={(state / 'parts').resolve()}",
        "-o", f"Dir::Etc::preferencesparts={(state / 'parts').resolve()}",
        "-o", f"Dir::Etc::trustedparts={(state / 'parts').resolve()}",
        "-o", f"Dir::State={state.resolve()}",
        "-o", f"Dir::State::Lists={(state / 'lists').resolve()}",
        "-o", f"Dir::State::status={(state / 'status').resolve()}",
        "-o", f"Dir::Cache={(state / 'cache').resolve()}",
        "-o", f"APT::Architecture={deb_arch}",
        "-o", f"APT::Architectures={deb_arch}",
        "-o", "Debug::NoLocking=1",
        "-o", "Acquire::Languages=none",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    what = f"apt-get for {', '.join(group.hosts)} ({group.name}, {group.mirror})"
    _run([*argv, "update", "--error-on=any"], f"{what}: update")
    uris = _run(
        [*argv, "install", "--print-uris", "--no-install-recommends", *group.packages],
        f"{what}: the closure of {' '.join(group.packages)}",
    )
    wanted: list[tuple[str, str, str, str]] = []  # url, file name, sha256, name=version
    for line in uris.splitlines():
        match = re.match(r"'(?P<url>[^']+)' (?P<file>\S+) (?P<size>\d+) (?P<hash>\S+)", line)
        if not match:
            continue
        # apt prints one of the index's hashes (it checks a download against all of them, the index being
        # checked against the signed Release): enough to tell a file already downloaded from a stale one.
        algorithm, _, digest = match["hash"].partition(":")
        if algorithm.lower() not in _APT_HASHES:
            raise InputError(f"{what}: {match['url']}: hash {match['hash']} of a kind apt does not use")
        name, version, _arch = unquote(match["file"]).removesuffix(".deb").split("_")
        wanted.append((match["url"], match["file"], match["hash"], f"{name}={version}"))
    debs = state / "debs"
    fetch = [spec for _url, file, digest, spec in wanted if not _matches(debs / file, digest)]
    if fetch:
        _run([*argv, "download", *fetch], f"{what}: download", cwd=debs)
    result.downloaded += len(fetch)
    for url, file, digest, spec in wanted:
        origin = debs / file
        if not _matches(origin, digest):
            raise InputError(f"{what}: {url}: the downloaded file does not match the index's {digest}")
        pool = url.removeprefix(group.mirror + "/")
        if pool == url or not pool.startswith("pool/"):
            pool = f"pool/main/{file}"
        rel = f"ubuntu/{pool}"
        _link(origin, result.tree / rel)
        result.packages.append(Package(rel, origin, url, spec.split("=", 1)[1]))


_APT_HASHES = {"md5sum": "md5", "sha1": "sha1", "sha256": "sha256", "sha512": "sha512"}


def _matches(path: Path, hash_string: str) -> bool:
    """Whether ``path`` holds the file of apt's ``ALGORITHM:hex`` hash."""
    algorithm, _, digest = hash_string.partition(":")
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, _APT_HASHES[algorithm.lower()]).hexdigest() == digest


def _deb_metadata(tree: Path, groups_: Sequence[Group], result: Resolved) -> None:
    """Each Ubuntu group's suites: the first holds the closure (per component of the pool), the others
    empty indexes; a ``Release`` holding only the header (the bundle's signing writes the rest)."""
    ubuntu = tree / "ubuntu"
    suites: dict[str, tuple[list[str], set[str]]] = {}
    filled: set[str] = set()  # the suites that list the closure
    for group in groups_:
        if group.os_id != "ubuntu":
            continue
        filled.add(group.sections[0])
        for suite in group.sections:
            components, arches = suites.setdefault(suite, ([], set()))
            components += [c for c in group.components if c not in components]
            arches.add(DEB_ARCHES[group.arch])
    for suite, (components, arches) in suites.items():
        for component in components:
            for deb_arch in sorted(arches):
                folder = ubuntu / "dists" / suite / component / f"binary-{deb_arch}"
                folder.mkdir(parents=True, exist_ok=True)
                text = ""
                if suite in filled and (ubuntu / "pool" / component).is_dir():
                    text = _run(
                        ["dpkg-scanpackages", "--multiversion", "--arch", deb_arch, f"pool/{component}"],
                        f"dpkg-scanpackages {ubuntu / 'pool' / component}",
                        cwd=ubuntu,
                    )
                (folder / "Packages").write_text(text)
                (folder / "Packages.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        header = [
            "Origin: provision bundle",
            "Label: provision bundle",
            f"Suite: {suite}",
            f"Codename: {suite.split('-', 1)[0]}",
            f"Components: {' '.join(components)}",
        ]
        (ubuntu / "dists" / suite / "Release").write_text("\n".join(header) + "\n")


# --- helpers


def _fetch(client: httpx.Client, url: str) -> bytes | None:
    if url.startswith("file://"):
        path = Path(unquote(urlparse(url).path))
        return path.read_bytes() if path.is_file() else None
    try:
        answer = client.get(url)
    except httpx.HTTPError as exc:
        raise InputError(f"{url}: cannot download: {exc}") from None
    if answer.status_code == 404:
        return None
    if answer.is_error:
        raise InputError(f"{url}: HTTP {answer.status_code}")
    return answer.content


def _link(origin: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(origin, dest)
    except OSError:
        shutil.copy2(origin, dest)

"""What an air-gapped apply of an inventory needs from its mirror, per node: one pure decision.

Read from the inventory alone (no host contacted) and the version lock, with the roles' own defaults and
file-name rules (:mod:`provision.ascend.files`, which the collection's filters use too), so the bundle
holds exactly the names the roles fetch:

- **OS repositories** of the node's flavour and architecture (``bootstrap_facts`` written by
  ``provision bootstrap``, else ``ansible_architecture`` / the build's ``--os`` and ``--arch``): openEuler's
  ``openEuler-<version>-*/<section>/<arch>/`` for every section of ``openeuler_repos_sections``; Ubuntu's
  ``dists/<suite>/`` for every suite of the release (``openeuler_repos_apt_suites``) and the packages
  they list;
- the **vendor .run files** of the node's stack and NPU line (``ascend_driver_chip``, ``cann_chip``): driver,
  firmware, CANN toolkit, operator package, NNAL (``cann_install_nnal``), the Ascend Docker Runtime;
- the **NPU-Exporter** binary where ``monitoring_enabled``;
- the **images** the nodes ``docker load``: the serving image of a node with a pool served in a container,
  and the container runtime's verification image where it differs;
- the **weights** archive of every profile with a ``model_url``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

from ansible.module_utils.parsing.convert_bool import boolean

from provision.ascend import files as ascend_files
from provision.ascend import lock
from provision.ascend.hardware import load_hardware
from provision.errors import InputError
from provision.image.transfer import default_output
from provision.inventory.load import Inventory, plain
from provision.inventory.roles import role_value
from provision.inventory.schema import HOST_GROUP
from provision.serving import plan as serving_plan

# The flavours the roles support (preflight): name -> (os-release ID, VERSION_ID).
FLAVOURS: dict[str, tuple[str, str]] = {
    "openeuler-22.03": ("openEuler", "22.03"),
    "openeuler-24.03": ("openEuler", "24.03"),
    "ubuntu-22.04": ("ubuntu", "22.04"),
}
# Ubuntu's release codename (ansible_distribution_release), which names the apt suites.
UBUNTU_CODENAMES = {"22.04": "jammy"}
ARCHES = ("aarch64", "x86_64")
DEB_ARCHES = {"aarch64": "arm64", "x86_64": "amd64"}


@dataclass(frozen=True, slots=True)
class Need:
    """One thing a node fetches from the mirror.

    ``path`` is the file's path in the bundle; for an OS repository (``kind`` ``os-repo``) it is the folder
    of the repository, and ``marker`` the file below it that must exist (``repodata/repomd.xml``,
    ``Release``), with ``*`` standing for the release part the inventory does not know
    (``openEuler-22.03-*``).
    """

    path: str
    kind: str
    version: str
    why: str
    sha256: str | None = None
    pinned_in: str = ""
    marker: str = ""
    deb_arch: str = ""
    # Needs with the same group: the node fetches one of them (the vendor file of its own NPU line, which
    # the inventory leaves to the node's PCI bus).
    one_of: str = ""
    # The inventory variables naming this file (an image: vllm_serve_image, container_runtime_verify_image).
    variables: tuple[str, ...] = ()


@dataclass(slots=True)
class NodeNeeds:
    host: str
    os: str
    arch: str
    stack: str
    needs: list[Need] = field(default_factory=list)


@dataclass(slots=True)
class Plan:
    nodes: list[NodeNeeds]

    def unique(self) -> dict[str, Need]:
        """Every distinct need by path (a file two nodes need is gathered once)."""
        found: dict[str, Need] = {}
        for node in self.nodes:
            for need in node.needs:
                found.setdefault(need.path, need)
        return found


# ------------------------------------------------------------------------------------------ the roles' rules


def role_flag(host_vars: Mapping[str, Any], name: str, role: str) -> bool:
    value = role_value(host_vars, name, role)
    return bool(boolean(value, strict=False)) if value is not None else False


# ------------------------------------------------------------------------------------------ per node


def host_os(host_vars: Mapping[str, Any]) -> str | None:
    """The flavour ``provision bootstrap`` recorded (``bootstrap_facts.os``), or None."""
    facts = plain(host_vars.get("bootstrap_facts")) or {}
    os_facts = facts.get("os") or {} if isinstance(facts, Mapping) else {}
    os_id, version = str(os_facts.get("id") or "").lower(), str(os_facts.get("version") or "")
    for name, (flavour_id, flavour_version) in FLAVOURS.items():
        if os_id == flavour_id.lower() and version == flavour_version:
            return name
    return f"{os_id}-{version}" if os_id else None


def host_arch(host_vars: Mapping[str, Any]) -> str | None:
    facts = plain(host_vars.get("bootstrap_facts")) or {}
    arch = facts.get("arch") if isinstance(facts, Mapping) else None
    arch = arch or plain(host_vars.get("ansible_architecture"))
    return str(arch) if arch else None


def plan(inventory: Inventory, *, os_names: Mapping[str, str] | None = None, arch: str | None = None) -> Plan:
    """What every host of ``npu_nodes`` needs; InputError listing every host that cannot be decided.

    ``os_names``: host -> flavour (key ``""``: every other host) and ``arch``, for the hosts whose inventory
    does not say (no ``bootstrap_facts``).
    """
    problems: list[str] = []
    nodes: list[NodeNeeds] = []
    hosts = inventory.group_hosts(HOST_GROUP)
    if not hosts:
        raise InputError(f"{inventory.source}: no host in group {HOST_GROUP}: nothing to bundle")
    given = dict(os_names or {})
    for name in sorted(set(given) - set(hosts) - {""}):
        problems.append(f"--os {name}={given[name]}: {name} is not a host of group {HOST_GROUP}")
    for host in hosts:
        host_vars = inventory.hosts[host]
        flavour = given.get(host) or host_os(host_vars) or given.get("")
        node_arch = host_arch(host_vars) or arch
        if flavour is None:
            problems.append(
                f"{host}: its OS is not in the inventory (no bootstrap_facts.os): give --os "
                f"{'|'.join(FLAVOURS)}"
            )
            continue
        if flavour not in FLAVOURS:
            problems.append(f"{host}: OS {flavour} is not supported; supported: {', '.join(FLAVOURS)}")
            continue
        if node_arch not in ARCHES:
            problems.append(
                f"{host}: architecture {node_arch} is not supported; supported: {', '.join(ARCHES)}"
            )
            continue
        nodes.append(node_needs(host, host_vars, flavour, node_arch))
    if problems:
        raise InputError(
            f"{inventory.source}: cannot decide what the bundle needs:\n  " + "\n  ".join(problems)
        )
    return Plan(nodes)


def node_needs(host: str, host_vars: Mapping[str, Any], flavour: str, arch: str) -> NodeNeeds:
    chosen = lock.host_stack(host_vars)
    stack, locked = chosen.name, dict(chosen.versions)
    node = NodeNeeds(host=host, os=flavour, arch=arch, stack=stack)
    node.needs += _os_repos(host_vars, flavour, arch)
    node.needs += _run_files(host_vars, locked, arch)
    if role_flag(host_vars, "monitoring_enabled", "monitoring") and role_flag(
        host_vars, "monitoring_npu_exporter", "monitoring"
    ):
        name = str(role_value(host_vars, "monitoring_npu_exporter_file", "monitoring"))
        sha = plain(host_vars.get("monitoring_npu_exporter_checksum")) or None
        node.needs.append(
            Need(
                f"ascend/{name}",
                "exporter",
                "",
                "NPU-Exporter (monitoring_enabled)",
                sha,
                "monitoring_npu_exporter_checksum" if sha else "",
            )
        )
    node.needs += _images(host_vars, stack, arch)
    node.needs += _weights(host, host_vars)
    return node


def _os_repos(host_vars: Mapping[str, Any], flavour: str, arch: str) -> list[Need]:
    os_id, version = FLAVOURS[flavour]
    if os_id == "openEuler":
        sections = role_value(host_vars, "openeuler_repos_sections", "openeuler_repos") or []
        return [
            Need(
                f"openeuler/openEuler-{version}-*/{section}/{arch}",
                "os-repo",
                f"openEuler {version}",
                f"openEuler {version} {section} repository ({arch})",
                marker="repodata/repomd.xml",
            )
            for section in sections
        ]
    codename = UBUNTU_CODENAMES[version]
    suites = role_value(host_vars, "openeuler_repos_apt_suites", "openeuler_repos") or [
        codename + suffix for suffix in ("", "-updates", "-security")
    ]
    return [
        Need(
            f"ubuntu/dists/{suite}",
            "os-repo",
            f"Ubuntu {version}",
            f"Ubuntu {version} suite {suite} ({arch})",
            marker="Release",
            deb_arch=DEB_ARCHES[arch],
        )
        for suite in suites
    ]


def _run_files(host_vars: Mapping[str, Any], locked: Mapping[str, Any], arch: str) -> list[Need]:
    driver = str(role_value(host_vars, "ascend_driver_version", "ascend_driver") or locked["driver"])
    firmware = role_value(host_vars, "ascend_driver_firmware_version", "ascend_driver")
    firmware = str(firmware or locked["firmware"])
    pinned = "ascend_driver_checksums"
    # (file, why, version, pin variable, NPU line): per line where the inventory leaves the line to the node
    per_line: list[tuple[str, str, str, str, str]] = []
    for chip in _lines(host_vars, "ascend_driver_chip", "ascend_driver"):
        files = ascend_files.driver_files(driver, firmware, arch=arch, chip=chip)
        per_line += [
            (files["driver"], f"NPU driver {driver}", driver, pinned, chip),
            (files["firmware"], f"NPU firmware {firmware}", firmware, pinned, chip),
        ]
    cann = str(role_value(host_vars, "cann_version", "cann") or locked["cann"])
    nnal = str(role_value(host_vars, "cann_nnal_version", "cann") or locked["nnal"])
    # The steps of a node with nothing installed: every package the role can install.
    for chip in _lines(host_vars, "cann_chip", "cann"):
        for component, version, name in ascend_files.cann_files(
            cann, nnal, arch=arch, chip=chip, nnal=role_flag(host_vars, "cann_install_nnal", "cann")
        ):
            per_line.append((name, f"CANN {component} {version}", version, "cann_checksums", chip))
    wanted: list[tuple[str, str, str, str]] = []
    alternatives: dict[str, str] = {}  # file -> the "one of" group it belongs to
    for why in dict.fromkeys(item[1] for item in per_line):
        names = list(dict.fromkeys(item[0] for item in per_line if item[1] == why))
        first = next(item for item in per_line if item[1] == why)
        for name in names:
            wanted.append((name, why, first[2], first[3]))
            if len(names) > 1:  # a file per NPU line: the node fetches the one of its own line
                alternatives[name] = f"{why} ({arch})"
    runtime = str(
        role_value(host_vars, "container_runtime_version", "container_runtime") or locked["docker_runtime"]
    )
    wanted.append(
        (
            ascend_files.docker_runtime_file(runtime, arch),
            f"Ascend Docker Runtime {runtime}",
            runtime,
            "container_runtime_checksums",
        )
    )
    needs = []
    for name, why, version, variable in wanted:
        pins = plain(host_vars.get(variable)) or {}
        pin = lock.file_pin(name, pins if isinstance(pins, Mapping) else None, variable)
        needs.append(
            Need(
                f"ascend/{name}",
                "run-file",
                version,
                why,
                pin.sha256,
                pin.source if pin.sha256 else "",
                one_of=alternatives.get(name, ""),
            )
        )
    return needs


def _lines(host_vars: Mapping[str, Any], name: str, role: str) -> list[str]:
    """The NPU line(s) whose vendor files a node needs: the inventory's, else every line provision knows
    (the role's default is the line the node shows on its PCI bus, and no host is contacted here)."""
    given = role_value(host_vars, name, role)
    if given:
        return [str(given)]
    return [model.base_image_tag for model in load_hardware().models.values()]


def _pools(host_vars: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pools = plain(host_vars.get("npu_pools_list")) or []
    return [pool for pool in pools if isinstance(pool, Mapping) and pool.get("profile")]


def serving_image(host_vars: Mapping[str, Any], stack: str, arch: str) -> str:
    """The image reference the serving role runs (``vllm_serve_image``, default: the lock's tag), as the
    serving plan names it."""
    return serving_plan.image_reference(lambda name: role_value(host_vars, name, "vllm_serve"), stack, arch)


def image_path(reference: str) -> str:
    return f"images/{default_output(reference).name}"


def _images(host_vars: Mapping[str, Any], stack: str, arch: str) -> list[Need]:
    if not _pools(host_vars):
        return []
    needs: list[Need] = []
    serving = serving_image(host_vars, stack, arch)
    verify = None
    if role_value(host_vars, "container_runtime_verify", "container_runtime") != "never":
        verify = str(role_value(host_vars, "container_runtime_verify_image", "container_runtime") or serving)
    if role_value(host_vars, "vllm_serve_mode", "vllm_serve") == "container":
        sha = plain(host_vars.get("vllm_serve_image_checksum")) or None
        needs.append(
            Need(
                image_path(serving),
                "image",
                serving,
                "serving image (vllm_serve_image)",
                sha,
                "vllm_serve_image_checksum" if sha else "",
                variables=(
                    "vllm_serve_image",
                    *(["container_runtime_verify_image"] if verify == serving else []),
                ),
            )
        )
    if verify is not None and all(need.version != verify for need in needs):
        sha = plain(host_vars.get("container_runtime_verify_image_checksum")) or None
        needs.append(
            Need(
                image_path(verify),
                "image",
                verify,
                "container runtime check image (container_runtime_verify_image)",
                sha,
                "container_runtime_verify_image_checksum" if sha else "",
                variables=("container_runtime_verify_image",),
            )
        )
    return needs


def _weights(host: str, host_vars: Mapping[str, Any]) -> list[Need]:
    """The weights archive of every served pool whose profile has a ``model_url`` (the serving plan's)."""
    needs = []
    for pool in serving_plan.host_plan(host, host_vars).pools:
        if not pool.model_url:
            continue
        name = PurePosixPath(urlparse(pool.model_url).path).name
        needs.append(
            Need(
                f"models/{name}",
                "weights",
                pool.model,
                f"weights of profile {pool.profile}",
                pool.model_sha256 or None,
                f"vllm_serve_profiles.{pool.profile}.model_sha256" if pool.model_sha256 else "",
            )
        )
    return needs


_ARCH_PART = re.compile(
    r"(?:^|/)binary-(?P<a>[^/]+)/|(?:^|/)(?:Contents-(?:udeb-)?|Components-)(?P<c>[^./]+)"
)


def apt_file_wanted(rel: str, deb_arch: str) -> bool:
    """Whether a file of an apt suite (``rel`` below ``dists/<suite>/``) serves ``deb_arch``: everything but
    the indexes of other architectures (``binary-<other>/``, ``Contents-<other>``, dep11's
    ``Components-<other>``), so apt finds every file
    its ``Release`` lists that it asks for (translations, dep11, the suite's own files)."""
    match = _ARCH_PART.search(rel)
    if match is None:
        return True
    return (match.group("a") or match.group("c")) in (deb_arch, "all")


def missing(plan_: Plan, present: Sequence[str]) -> dict[str, list[Need]]:
    """Per host, what the bundle (its file paths ``present``) lacks."""
    import fnmatch

    files = set(present)
    gaps: dict[str, list[Need]] = {}
    for node in plan_.nodes:
        had = {need.one_of for need in node.needs if need.one_of and need.path in files}
        for need in node.needs:
            if need.kind == "os-repo":
                pattern = f"{need.path}/{need.marker}"
                found = any(fnmatch.fnmatchcase(path, pattern) for path in files)
            else:
                found = need.path in files or need.one_of in had
            if not found:
                gaps.setdefault(node.host, []).append(need)
    return gaps

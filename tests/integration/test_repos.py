"""The local mirror (provision_sim.mirror.repos) and the openeuler_repos role on the mixed session cluster.

Unit tests check that the mirror and the role agree (every package the role installs is in the mirror,
every variable ``sim up`` writes is one the inventory validator knows). The cluster tests run
plan -> apply -> apply again on openEuler 22.03, Ubuntu 22.04 and openEuler 24.03 nodes, then look at the
nodes: repo files, packages, the REAL ``lspci`` listing the simulated NPUs, the kernel hold.
"""

from __future__ import annotations

import json
import platform
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from provision import openpgp
from provision.ascend import lock
from provision.inventory.schema import HostSettings
from provision.inventory.validate import check
from provision.paths import ansible_root
from provision_sim.cluster import Cluster
from provision_sim.mirror import repos
from tests.helpers import Run, gnupg_home, plain_ansible_playbook, provision_cli, provision_ok, sh

ROLE = ansible_root() / "roles" / "openeuler_repos"
TIMEOUT_S = 600
KERNEL = "6.18.44-fc-v669"
STRAY = {
    # The distributions' own sources, unreachable on an air-gapped site: the role moves them aside.
    "openeuler": ("/etc/yum.repos.d/openEuler.repo", "[OS]\nname=OS\nbaseurl=http://repo.openeuler.org/x/\n"),
    "ubuntu": ("/etc/apt/sources.list.d/ubuntu.list", "deb http://archive.ubuntu.com/ubuntu jammy main\n"),
}


def _role_vars(name: str, kernel: str = KERNEL) -> list[str]:
    data = yaml.safe_load((ROLE / "vars" / name).read_text())
    return [str(p).replace("{{ ansible_kernel }}", kernel) for p in data["openeuler_repos_packages"]]


# -- unit ----------------------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        (
            "5.10.0-136.12.0.86.oe2203sp1.aarch64",
            ("kernel-devel", "kernel-headers", "5.10.0-136.12.0.86.oe2203sp1"),
        ),
        (KERNEL, (f"kernel-devel-{KERNEL}", f"kernel-headers-{KERNEL}", "6.18.44")),
    ],
)
def test_kernel_packages_match_uname_r(kernel: str, expected: tuple[str, str, str]) -> None:
    assert repos._kernel_rpm_names(kernel) == expected


@pytest.mark.unit
def test_mirror_has_every_package_the_role_installs() -> None:
    rpms = repos.rpm_packages(KERNEL)
    assert set(_role_vars("openEuler.yml")) <= set(rpms)
    assert {"pciutils", "net-tools"} <= {name for name, p in rpms.items() if p.debs}
    debs = set(repos.deb_packages(KERNEL)) | set(repos.DEBIAN_PACKAGES)
    assert set(_role_vars("Ubuntu.yml")) <= debs


@pytest.mark.unit
def test_mirror_carries_the_locked_stack_and_an_older_one() -> None:
    locked, older = repos.ascend_sets()
    assert locked["driver"] == "25.5.1" and locked["cann"] == "9.1.0"
    assert older == {"driver": "25.0.rc1.1", "firmware": "7.7.0.1.231", "cann": "8.2.RC1", "nnal": "8.2.RC1"}
    # and the CANN of every other stack of the lock, so provision_stack 0.18.0 converges and upgrades
    cann = {(s["cann"], s["nnal"]) for s in repos.stack_cann_sets()}
    assert ("8.5.1", "8.5.1") in cann and ("9.1.0", "9.1.0") not in cann
    assert cann == {
        (str(lock.stack(n)["cann"]), str(lock.stack(n)["nnal"]))
        for n in lock.stack_names()
        if n != lock.default_stack_name()
    }


@pytest.mark.unit
def test_sim_group_vars_pass_the_inventory_validator(tmp_path: Path) -> None:
    url = "http://10.200.9.1:8080"
    text = repos.group_vars(url)
    data = yaml.safe_load(text)
    # The mirror variables of every role the simulated cluster points at its mirror (repos, driver, runtime).
    defaults = {
        name
        for role in ROLE.parent.iterdir()
        if (role / "defaults" / "main.yml").is_file()
        for name in yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    }
    assert set(data) <= defaults | set(HostSettings.model_fields)
    assert data["openeuler_repos_mirror_url"] == f"{url}/openeuler"
    assert data["provision_mirror_url"] == f"{url}/ascend"
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(text)
    (tmp_path / "inventory.ini").write_text("[npu_nodes]\nnode1 ansible_host=10.200.9.11\n")
    check(tmp_path / "inventory.ini")  # raises InvalidInventory on any unknown or malformed variable


@pytest.mark.unit
def test_sim_names_its_own_sha256_for_the_files_the_lock_pins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock pins the vendor's files by name; the simulator's stand-ins carry those names but not those
    bytes. Its inventory pins its own sha256 for exactly those names (an inventory pin wins over the lock's),
    so the simulated cluster installs its own files while every other file keeps the mirror's list."""
    driver = f"Ascend-hdk-910b-npu-driver_{lock.default_stack()['driver']}_linux-aarch64.run"
    toolkit = f"Ascend-cann-toolkit_{lock.default_stack()['cann']}_linux-aarch64.run"
    nnal = f"Ascend-cann-nnal_{lock.default_stack()['nnal']}_linux-aarch64.run"
    ascend = tmp_path / "mirror" / "ascend"
    ascend.mkdir(parents=True)
    sims = {driver: "1" * 64, toolkit: "2" * 64, nnal: "3" * 64}
    (ascend / "sha256sums.txt").write_text("".join(f"{sha}  {name}\n" for name, sha in sims.items()))
    url = "http://10.200.9.1:8080"
    assert "_checksums" not in repos.group_vars(url, tmp_path / "mirror")  # the lock pins nothing today
    monkeypatch.setattr(lock, "sha256_pins", lambda: {driver: "a" * 64, toolkit: "b" * 64})
    data = yaml.safe_load(repos.group_vars(url, tmp_path / "mirror"))
    assert data["ascend_driver_checksums"] == {driver: "1" * 64}
    assert data["cann_checksums"] == {toolkit: "2" * 64}  # NNAL: not pinned by the lock, not by the sim
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(repos.group_vars(url, tmp_path / "mirror"))
    (tmp_path / "inventory.ini").write_text("[npu_nodes]\nnode1 ansible_host=10.200.9.11\n")
    check(tmp_path / "inventory.ini")


# -- the session cluster ---------------------------------------------------------------------------------


def _mirror(cluster: Cluster) -> repos.Served:
    served = repos.served(cluster.dir)
    assert served is not None, "sim up serves the local mirror"
    return served


@pytest.mark.cluster
def test_mirror_layout_signatures_and_checksums(
    request: pytest.FixtureRequest, sim_cluster: Cluster, tmp_path: Path
) -> None:
    served = _mirror(sim_cluster)
    root, arch = served.root, platform.machine()
    for release in repos.OPENEULER_RELEASES:
        for section in repos.OPENEULER_SECTIONS:
            assert (root / "openeuler" / release / section / arch / "repodata" / "repomd.xml").is_file()
        assert (root / "openeuler" / release / "OS" / arch / repos.RPM_KEY_NAME).is_file()
    packages = root / "openeuler" / repos.OPENEULER_RELEASES[0] / "OS" / arch / "Packages"
    rpmdb = tmp_path / "rpmdb"
    rpm = ["rpm", "--dbpath", str(rpmdb)]
    subprocess.run([*rpm, "--initdb"], check=True)
    subprocess.run([*rpm, "--import", str(packages.parent / repos.RPM_KEY_NAME)], check=True)
    checked = subprocess.run(
        [*rpm, "--checksig", *map(str, sorted(packages.glob("*.rpm")))], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.splitlines()
    assert len(lines) == 9 and all(line.endswith("digests signatures OK") for line in lines), (
        lines
    )  # dkms: everything

    home = gnupg_home(request, tmp_path)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run([*gpg, "--import", str(root / "ubuntu" / repos.APT_KEY_NAME)], check=True)
    for suite in repos.UBUNTU_SUITES:
        verified = subprocess.run(
            [*gpg, "--verify", str(root / "ubuntu/dists" / suite / "InRelease")],
            capture_output=True,
            text=True,
        )
        assert verified.returncode == 0, verified.stderr

    sums = subprocess.run(
        ["sha256sum", "-c", "sha256sums.txt"], cwd=root / "ascend", capture_output=True, text=True
    )
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert "Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-" + arch + ".run: OK" in sums.stdout

    # Served over HTTP on the bridge address, as the nodes see it.
    with urllib.request.urlopen(f"{served.url}/ascend/sha256sums.txt", timeout=10) as answer:
        assert answer.read() == (root / "ascend" / "sha256sums.txt").read_bytes()
    group_vars = yaml.safe_load(sim_cluster.group_vars_path.read_text())
    assert group_vars["openeuler_repos_mirror_url"] == f"{served.url}/openeuler"


def _state(cluster: Cluster) -> dict[str, str]:
    """What plan must not change: source files, packages, dpkg selections, dnf.conf."""
    script = (
        "ls -la /etc/yum.repos.d /etc/apt/sources.list.d 2>/dev/null; cat /etc/dnf/dnf.conf;"
        " rpm -qa 2>/dev/null | sort; dpkg --get-selections | grep -v deinstall"
    )
    return {node.name: sh(cluster, node.name, script) for node in cluster.nodes}


@pytest.mark.cluster
def test_repos_plan_apply_repeat(sim_cluster: Cluster, tmp_path: Path) -> None:
    inventory = str(sim_cluster.inventory_path)
    runs = tmp_path / "runs"
    fresh = {}
    for node in sim_cluster.nodes:
        family = "openeuler" if node.flavour.startswith("openeuler") else "ubuntu"
        path, content = STRAY[family]
        own = (
            "/etc/yum.repos.d/provision-openEuler.repo"
            if family == "openeuler"
            else ("/etc/apt/sources.list.d/provision-ubuntu.sources")
        )
        fresh[node.name] = (
            sh(sim_cluster, node.name, f"test -e {own} && echo no || echo yes").strip() == "yes"
        )
        sh(sim_cluster, node.name, f"printf '{content}' > {path}")

    before = _state(sim_cluster)
    plan = provision_ok("plan", inventory, "-p", "repos", runs=runs, timeout=TIMEOUT_S)
    assert plan["ok"] and plan["check"]
    assert _state(sim_cluster) == before, "plan changed a node"
    tasks: dict[str, set[str]] = {}
    for change in plan["changes"]:
        tasks.setdefault(change["host"], set()).add(change["task"].split(" : ", 1)[-1])
    for node in sim_cluster.nodes:
        dnf = node.flavour.startswith("openeuler")
        assert (
            "Disable the other repository files (moved aside)"
            if dnf
            else "Disable the other source files (moved aside)"
        ) in tasks[node.name]
        if fresh[node.name]:
            assert ("Write the openEuler repositories" if dnf else "Write the Ubuntu source") in tasks[
                node.name
            ]
            assert "Packages to install once the sources are in place" in tasks[node.name]

    first = provision_ok("apply", inventory, "-p", "repos", runs=runs, timeout=TIMEOUT_S)
    assert all(stats["changed"] > 0 for stats in first["hosts"].values()), first["hosts"]
    again = provision_ok("apply", inventory, "-p", "repos", runs=runs, timeout=TIMEOUT_S)
    assert {host: stats["changed"] for host, stats in again["hosts"].items()} == {
        node.name: 0 for node in sim_cluster.nodes
    }, again["changes"]

    arch = platform.machine()
    for node in sim_cluster.nodes:
        npus = sh(sim_cluster, node.name, "lspci -n -d 19e5:")  # the REAL lspci from the mirror's package
        assert [line.split()[2] for line in npus.splitlines()].count("19e5:d802") == 8, npus
        sh(sim_cluster, node.name, "command -v ifconfig dkms gcc make")
        if node.flavour.startswith("openeuler"):
            version = node.flavour.removeprefix("openeuler-")
            repo = sh(sim_cluster, node.name, "cat /etc/yum.repos.d/provision-openEuler.repo")
            for section in repos.OPENEULER_SECTIONS:
                assert f"/openeuler/openEuler-{version}-LTS-SP1/{section}/$basearch/\n" in repo
            assert "gpgcheck=1\n" in repo
            assert "x86_64" not in repo and "aarch64" not in repo, "the arch comes from $basearch"
            listing = sh(sim_cluster, node.name, "ls /etc/yum.repos.d")
            assert listing.split() == ["openEuler.repo.provision-disabled", "provision-openEuler.repo"]
            sh(sim_cluster, node.name, "rpm -q pciutils net-tools dkms gcc make python3-devel")
            sh(sim_cluster, node.name, "rpm -q kernel-devel-$(uname -r) kernel-headers-$(uname -r)")
            sh(sim_cluster, node.name, "test -d /usr/src/kernels/$(uname -r)")
            assert "exclude=kernel*\n" in sh(sim_cluster, node.name, "cat /etc/dnf/dnf.conf")
            assert "gpg-pubkey-" in sh(sim_cluster, node.name, "rpm -qa"), "signatures were checked"
        else:
            source = sh(sim_cluster, node.name, "cat /etc/apt/sources.list.d/provision-ubuntu.sources")
            assert "Suites: jammy jammy-updates jammy-security\n" in source
            assert "Signed-By: /etc/apt/keyrings/provision-ubuntu.asc\n" in source
            listing = sh(sim_cluster, node.name, "ls /etc/apt/sources.list.d")
            assert listing.split() == ["provision-ubuntu.sources", "ubuntu.list.provision-disabled"]
            status = sh(sim_cluster, node.name, "dpkg -s pciutils net-tools dkms gcc make python3-dev")
            assert status.count("Status: install ok installed") == 6
            sh(sim_cluster, node.name, "test -d /lib/modules/$(uname -r)/build")
            held = sh(sim_cluster, node.name, "dpkg --get-selections | awk '$2 == \"hold\" {print $1}'")
            assert held.split() == [f"linux-headers-{platform.release()}"]
    assert arch  # the mirror was built for this host's nodes (see test_mirror_layout...)


@pytest.mark.cluster
def test_plain_ansible_playbook_then_plan_other_settings(sim_cluster: Cluster, tmp_path: Path) -> None:
    """``ansible-playbook`` without provision, from an empty project directory outside the checkout with the
    user's own minimal ansible.cfg (the collection installed with ansible-galaxy, found through it),
    converges the nodes; then a plan with an unsigned mirror and no kernel hold shows those diffs and changes
    nothing."""
    done = plain_ansible_playbook(
        sim_cluster.inventory_path, "provision.ascend.repos", home=tmp_path, timeout=600
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    recap = done.stdout[done.stdout.index("PLAY RECAP") :]
    for node in sim_cluster.nodes:
        line = next(line for line in recap.splitlines() if line.startswith(node.name))
        assert "failed=0" in line and "unreachable=0" in line, line

    before = _state(sim_cluster)
    settings = {"openeuler_repos_gpgcheck": False, "openeuler_repos_hold_kernel": False}
    plan = provision_ok(
        "plan",
        str(sim_cluster.inventory_path),
        "-p",
        "repos",
        "-e",
        json.dumps(settings),
        runs=tmp_path,
        timeout=TIMEOUT_S,
    )
    assert _state(sim_cluster) == before, "plan changed a node"
    changes: dict[str, dict[str, str]] = {}
    for change in plan["changes"]:
        changes.setdefault(change["host"], {})[change["task"].split(" : ", 1)[-1]] = change["diff"]
    for node in sim_cluster.nodes:
        if node.flavour.startswith("openeuler"):
            assert set(changes[node.name]) == {
                "Write the openEuler repositories",
                "Remove the kernel exclude from dnf.conf",
            }
            diff = changes[node.name]["Write the openEuler repositories"]
            assert "-gpgcheck=1" in diff and "+gpgcheck=0" in diff
        else:
            assert set(changes[node.name]) == {
                "Write the Ubuntu source",
                "Refresh the apt cache",
                "Hold the installed kernel packages",
            }
            assert "+Trusted: yes" in changes[node.name]["Write the Ubuntu source"]


@pytest.mark.cluster
def test_openeuler_key_pinned_by_fingerprint(sim_cluster: Cluster, tmp_path: Path) -> None:
    """A pinned openEuler signing key: another key stops the openEuler nodes before any repo file is
    written (plan says so too); the right one is installed and the repo files name that copy, so dnf never
    fetches a key from the mirror again; a repeat changes nothing. Ubuntu nodes are not concerned."""
    served = _mirror(sim_cluster)
    release = repos.OPENEULER_RELEASES[0]
    key = served.root / "openeuler" / release / "OS" / platform.machine() / repos.RPM_KEY_NAME
    (fingerprint,) = openpgp.key_fingerprints(key.read_text())  # one key signs every release of the mirror
    wrong = fingerprint[::-1]
    inventory = str(sim_cluster.inventory_path)
    openeuler = [n.name for n in sim_cluster.nodes if n.flavour.startswith("openeuler")]
    repo = "/etc/yum.repos.d/provision-openEuler.repo"
    listing = "ls /etc/yum.repos.d /etc/pki/rpm-gpg 2>/dev/null; cat " + repo + " 2>/dev/null; true"
    before = {name: sh(sim_cluster, name, listing) for name in openeuler}

    def run(verb: str, pin: str) -> Run:
        settings = json.dumps({"openeuler_repos_gpg_key_fingerprint": pin})
        done = provision_cli(
            verb, inventory, "-p", "repos", "-e", settings, "--json", runs=tmp_path, timeout=TIMEOUT_S
        )
        return Run(done.returncode, json.loads(done.stdout), done.stderr, 0.0)

    for verb in ("plan", "apply"):
        refused = run(verb, " ".join(wrong[i : i + 4] for i in range(0, 40, 4)))
        assert refused.rc == 1, refused.stderr[-3000:]
        failures = refused.failures()
        assert sorted(failures) == sorted(openeuler), failures
        for name in openeuler:
            assert f"has fingerprint {fingerprint}, not the pinned {wrong}" in failures[name]
            assert f"No repository file was written on {name}" in failures[name]
            assert sh(sim_cluster, name, listing) == before[name], f"{verb} changed {name}"

    try:
        pinned = run("apply", fingerprint.lower())
        assert pinned.rc == 0, (pinned.failures(), pinned.stderr[-3000:])
        copy = f"/etc/pki/rpm-gpg/RPM-GPG-KEY-provision-{fingerprint}"
        for name in openeuler:
            assert sh(sim_cluster, name, f"cat {copy}") == key.read_text()
            assert sh(sim_cluster, name, f"stat -c %a:%U {copy}").strip() == "644:root"
            text = sh(sim_cluster, name, f"cat {repo}")
            assert text.count(f"gpgkey=file://{copy}\n") == len(repos.OPENEULER_SECTIONS), text
            assert "RPM-GPG-KEY-openEuler" not in text
        again = run("apply", fingerprint)
        assert again.rc == 0, (again.failures(), again.stderr[-3000:])
        assert set(again.changed().values()) == {0}, again.summary["changes"]
    finally:
        # The session cluster's other tests expect the unpinned repo files.
        restored = provision_cli(
            "apply", inventory, "-p", "repos", "--json", runs=tmp_path, timeout=TIMEOUT_S
        )
        assert restored.returncode == 0, restored.stderr[-3000:]

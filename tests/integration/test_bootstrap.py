"""`provision bootstrap` on simulated new servers: real sshd, real paramiko, real sudo/visudo, real apt.

Each test starts its own cluster and makes it look like a rack fresh from the vendor: root may log in with a
password (the one planted below, grepped for afterwards), there is no deploy user, and one node is a minimal
Ubuntu without python3 and without sudo, whose package repository (a local ``file:`` apt source holding the
node's own python3 and sudo packages, repacked before they are purged) lets bootstrap install them. The other
nodes come with sudo, as real servers do (the sim's base image has it).
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import paramiko
import pytest

from provision.bootstrap.hostkeys import PublicKey
from provision.inventory.load import load_inventory
from provision.inventory.validate import validate
from provision_sim.cluster import Cluster
from provision_sim.nodes import new_key_pair
from tests.helpers import sh

pytestmark = pytest.mark.cluster
ClusterFactory = Callable[..., Cluster]  # the sim_cluster_factory fixture (tests/conftest.py)

PASSWORD = f"Rack3-first-boot-{secrets.token_hex(8)}"
"""The planted secret: must appear in no output and no file."""
PASSWORD_ENV = "RACK_ROOT_PASSWORD"
OS_LIST = "openeuler-22.03,ubuntu-22.04,openeuler-24.03"

# `python -m provision bootstrap ...`, also before the verb is listed in provision.cli.VERBS.
CLI = (
    "import sys\n"
    "from provision.cli import app, bootstrap, main\n"
    "if not any(c.name == 'bootstrap' for c in app.registered_commands):\n"
    "    bootstrap.register(app)\n"
    "sys.argv[0] = 'provision'\n"
    "main()\n"
)

USER_INVENTORY = """\
# Rack 3, row B -- hand-maintained; bootstrap must keep these comments.
[login_nodes]
gateway ansible_host=192.0.2.1   # the bastion, not an NPU node

[npu_nodes]
# new Atlas 800 A2 servers below
"""

NEW_RACK_SSHD = "PermitRootLogin yes\nPasswordAuthentication yes\n"

REPACK = r"""
set -eu
repo=/srv/rack-repo
mkdir -p "$repo"
for p in python3-minimal python3 sudo; do           # the node's own packages, as its mirror would hold them
  d=$(mktemp -d); mkdir -p "$d/DEBIAN"
  dpkg-query -s "$p" | awk '/^[^ ]/ { skip = ($1 == "Status:" || $1 == "Conffiles:") } !skip' \
    > "$d/DEBIAN/control"
  dpkg-query -L "$p" | while read -r f; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    if [ -d "$f" ]; then [ -L "$f" ] || mkdir -p "$d$f"; continue; fi   # /lib -> usr/lib stays a dir
    mkdir -p "$d$(dirname "$f")"; cp -a "$f" "$d$f"
  done
  for s in preinst postinst prerm postrm; do
    if [ -f "/var/lib/dpkg/info/$p.$s" ]; then cp -a "/var/lib/dpkg/info/$p.$s" "$d/DEBIAN/"; fi
  done
  dpkg-deb --root-owner-group -b "$d" "$repo/" >/dev/null
  rm -rf "$d"
done
cd "$repo"; : > Packages
for deb in *.deb; do
  dpkg-deb -f "$deb" >> Packages
  printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$deb" "$(stat -c %s "$deb")" \
    "$(sha256sum "$deb" | cut -d' ' -f1)" >> Packages
done
echo 'deb [trusted=yes] file:/srv/rack-repo ./' > /etc/apt/sources.list.d/rack.list
export DEBIAN_FRONTEND=noninteractive SUDO_FORCE_REMOVE=yes
apt-get purge -y -q python3 python3-minimal sudo >/dev/null
! command -v python3
! command -v sudo
"""


# --- helpers -----------------------------------------------------------------------------------------------


def new_rack(
    cluster: Cluster, *, minimal: str | None = None, root_passwords: dict[str, str] | None = None
) -> None:
    """Root password login with PASSWORD, no deploy user, sudo installed, except on ``minimal``."""
    for node in cluster.nodes:
        password = (root_passwords or {}).get(node.name, PASSWORD)
        sh(
            cluster,
            node.name,
            f"printf '{NEW_RACK_SSHD}' > /etc/ssh/sshd_config.d/00-new-rack.conf\n"
            f"echo 'root:{password}' | chpasswd\n"
            "rm -f /root/.ssh/authorized_keys\n"
            "systemctl reload ssh\n",
        )
        if node.name == minimal:
            sh(cluster, node.name, REPACK, timeout=300)


def bootstrap(*args: str, password: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
    env["PROVISION_QUIET"] = "1"
    if password:
        env[PASSWORD_ENV] = PASSWORD
    return subprocess.run(
        [sys.executable, "-c", CLI, "bootstrap", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def host_key(cluster: Cluster, node: str) -> PublicKey:
    line = (cluster.node(node).root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    return PublicKey.from_base64(line[0], line[1])


def assert_no_secret(*texts: str, folders: tuple[Path, ...] = ()) -> None:
    for text in texts:
        assert PASSWORD not in text
    needle = PASSWORD.encode()
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert needle not in path.read_bytes(), f"the password is in {path}"


def close_ssh_masters(control_dir: Path) -> None:
    for sock in control_dir.glob("*"):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "x"],
            capture_output=True,
            timeout=10,
            check=False,
        )


def password_login_refused(address: str, user: str) -> bool:
    transport = paramiko.Transport(socket.create_connection((address, 22), timeout=10))
    try:
        transport.start_client(timeout=10)
        try:
            transport.auth_password(user, PASSWORD)
        except paramiko.AuthenticationException:
            return True
        return False
    finally:
        transport.close()


def row(output: str, host: str) -> list[str]:
    """Cells of ``host``'s first line in the result table: host, address, result, host key, NPUs, details."""
    line = next(line for line in output.splitlines() if line.startswith(f"| {host} "))
    return [cell.strip() for cell in line.strip("|").split("|")]


# --- the flow ----------------------------------------------------------------------------------------------


def test_new_rack_to_preflight_then_nothing_to_do(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory("bsa", nodes=3, os_list=OS_LIST)
    new_rack(cluster, minimal="node2")
    ip = {n.name: n.ip for n in cluster.nodes}
    # node3: the vendor set up an admin account that needs its password for sudo.
    sh(
        cluster,
        "node3",
        f"useradd -m -s /bin/bash admin && echo 'admin:{PASSWORD}' | chpasswd && "
        "echo 'admin ALL=(ALL:ALL) ALL' > /etc/sudoers.d/admin && chmod 440 /etc/sudoers.d/admin",
    )
    # node1: the vendor's key is authorized for root (the others refuse it and take the password).
    vendor = new_key_pair("vendor")
    (tmp_path / "vendor_key").write_text(vendor.private_openssh)
    (tmp_path / "vendor_key").chmod(0o600)
    sh(
        cluster,
        "node1",
        f"install -d -m 700 /root/.ssh && echo '{vendor.public_line}' > /root/.ssh/authorized_keys",
    )
    folder = tmp_path / "site"
    folder.mkdir()
    inventory = folder / "inventory.ini"
    inventory.write_text(USER_INVENTORY)
    deploy_key = tmp_path / "keys" / "deploy_ed25519"
    args = ["-i", str(inventory), "--deploy-key", str(deploy_key)]

    first = bootstrap(
        *args,
        "--key",
        str(tmp_path / "vendor_key"),
        "--password-env",
        PASSWORD_ENV,
        "--trust-on-first-use",
        "--harden",
        f"node1={ip['node1']}",
        f"node2={ip['node2']}",
        f"node3=admin@{ip['node3']}",
    )
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    for name in ("node1", "node2", "node3"):
        assert row(first.stdout, name)[:5] == [
            name,
            ip[name],
            "changed",
            host_key(cluster, name).fingerprint,
            "8 x 910B",
        ]
    assert "node1            logged in as root with key, root\n" in first.stdout
    assert "node2            logged in as root with password, root\n" in first.stdout
    assert "node3            logged in as admin with password, sudo with password\n" in first.stdout
    assert "installed python3 sudo (apt-get)" in out
    assert "hardened sshd" in out
    assert f"generated the deploy key {deploy_key}" in first.stdout
    assert "3 host(s): 3 changed, 0 unchanged, 0 failed" in first.stdout

    # On the nodes: the deploy user, its sudoers file (valid), python3 back, sshd hardened.
    for name in ("node1", "node2", "node3"):
        assert sh(cluster, name, "id -un provision").strip() == "provision"
        assert sh(cluster, name, "cat /etc/sudoers.d/90-provision-provision").endswith(
            "provision ALL=(ALL:ALL) NOPASSWD: ALL\n"
        )
        sh(
            cluster,
            name,
            "visudo -c >/dev/null && command -v python3 && sudo -l -U provision | grep -q NOPASSWD",
        )
        assert sh(cluster, name, "head -n 1 /etc/ssh/sshd_config").startswith("# BEGIN provision bootstrap")
        assert password_login_refused(ip[name], "root")
    assert password_login_refused(ip["node3"], "admin")

    # The inventory: the user's lines intact and in order, the hosts added, host keys recorded.
    text = inventory.read_text()
    user_lines = USER_INVENTORY.splitlines()
    positions = [text.splitlines().index(line) for line in user_lines]
    assert positions == sorted(positions)
    loaded = load_inventory(inventory)
    assert sorted(loaded.groups["npu_nodes"]) == ["node1", "node2", "node3"]
    assert sorted(loaded.groups["npu_910b"]) == ["node1", "node2", "node3"]
    assert loaded.groups["login_nodes"] == ["gateway"]
    assert not validate(loaded)
    node2 = loaded.hosts["node2"]
    assert node2["ansible_user"] == "provision"
    assert node2["ascend_npu_count"] == 8
    assert node2["bootstrap_facts"]["os"]["id"] == "ubuntu"
    assert node2["bootstrap_facts"]["npus"]["bus_ids"][0] == "0000:01:00.0"
    assert loaded.hosts["node1"]["bootstrap_facts"]["os"]["pretty_name"] == "openEuler 22.03 (LTS-SP1)"
    known = (folder / "known_hosts").read_text().splitlines()
    assert sorted(known) == sorted(
        f"{ip[n]} ssh-ed25519 {host_key(cluster, n).base64}" for n in ("node1", "node2", "node3")
    )

    # `provision apply` works with it: preflight over SSH as the deploy user, host keys checked.
    control = tmp_path / "cp"
    control.mkdir()
    env = {
        **os.environ,
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
        "PROVISION_RUNS_DIR": str(tmp_path / "runs"),
    }
    try:
        apply = subprocess.run(
            [sys.executable, "-m", "provision", "apply", str(inventory), "-p", "preflight"],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    finally:
        close_ssh_masters(control)
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert "8 x 910B" in apply.stdout

    # A second run: no password needed (the deploy key gets in), nothing changes, and it says so.
    snapshot = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    second = bootstrap(*args, "--harden", "node1", "node2", "node3", password=False)
    assert second.returncode == 0, second.stdout + second.stderr
    for name in ("node1", "node2", "node3"):
        assert row(second.stdout, name)[2:] == [
            "no change",
            host_key(cluster, name).fingerprint,
            "8 x 910B",
            "already bootstrapped; inventory up to date",
        ]
    assert "3 host(s): 0 changed, 3 unchanged, 0 failed" in second.stdout
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == snapshot

    assert_no_secret(
        first.stdout,
        first.stderr,
        second.stdout,
        second.stderr,
        apply.stdout,
        apply.stderr,
        folders=(tmp_path,),
    )


def test_each_failure_has_its_own_message_and_the_others_succeed(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory("bsb", nodes=4, os_list="openeuler-22.03,ubuntu-22.04")
    new_rack(cluster, root_passwords={"node2": "another-password-entirely"})
    ip = {n.name: n.ip for n in cluster.nodes}
    sh(cluster, "node3", f"useradd -m -s /bin/bash ops && echo 'ops:{PASSWORD}' | chpasswd")
    folder = tmp_path / "site"
    folder.mkdir()
    inventory = folder / "inventory.ini"
    inventory.write_text(USER_INVENTORY)
    # node4 was recorded earlier with another key: whoever answers there now is not the node we knew.
    recorded = new_key_pair("root@node4").public_line.split()
    (folder / "known_hosts").write_text(f"{ip['node4']} {recorded[0]} {recorded[1]}\n")
    before = (folder / "known_hosts").read_text()
    # node1 is hostile: what it reports about itself carries a template that would run on the controller.
    pwned = tmp_path / "pwned-by-node1"
    planted = f"{{{{ lookup('pipe', 'touch {pwned}') }}}}"
    sh(
        cluster,
        "node1",
        "grep -v '^PRETTY_NAME=' /etc/os-release > /tmp/os-release && "
        f"printf 'PRETTY_NAME=\"%s\"\\n' {shlex.quote(planted)} >> /tmp/os-release && "
        "rm -f /etc/os-release && mv /tmp/os-release /etc/os-release",
    )
    nobody = cluster.subnet.node_ip(150)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(
        "# delivery note, rack 3\n"
        f"node1={ip['node1']}\nnode2={ip['node2']}\nnode3=ops@{ip['node3']}\nnode4={ip['node4']}\n"
        f"gone={nobody}   # never racked\nclosed={ip['node1']}:2222\n"
    )

    result = bootstrap(
        "-i",
        str(inventory),
        "--deploy-key",
        str(tmp_path / "deploy"),
        "--password-env",
        PASSWORD_ENV,
        "--host-key",
        f"node1={host_key(cluster, 'node1').fingerprint}",
        "--trust-on-first-use",
        "--timeout",
        "5",
        "--from",
        str(hosts),
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert row(out, "node1")[2] == "changed"
    assert "FAILED node2 (login refused):\n    node2 (" in out
    assert "login as root refused: wrong password for root" in out
    assert "FAILED node3 (no sudo):" in out
    assert "ops has no sudo rights (sudo: ops is not in the sudoers file.)" in out
    assert "FAILED node4 (HOST KEY CHANGED):" in out
    assert f"HOST KEY CHANGED for node4 ({ip['node4']})" in out
    assert f"now presents {host_key(cluster, 'node4').fingerprint}" in out
    assert "man-in-the-middle" in out and "nothing was sent to the host" in out
    assert "FAILED gone (unreachable):" in out
    assert f"gone ({nobody}): " in out and ("No route to host" in out or "no answer within 5 s" in out)
    assert "FAILED closed (unreachable):" in out
    assert f"closed ({ip['node1']}:2222): connection refused on port 2222" in out
    assert "6 host(s): 1 changed, 0 unchanged, 5 failed (node2, node3, node4, gone, closed)" in out

    # Nothing but a key exchange happened with node4: no login was tried there.
    journal = sh(cluster, "node4", "journalctl -u ssh --no-pager -o cat")
    assert "Failed password" not in journal and "Accepted" not in journal and "Invalid user" not in journal
    # Only node1 made it into the inventory; node4's old key is still what is recorded for it.
    assert load_inventory(inventory).groups["npu_nodes"] == ["node1"]
    assert (folder / "known_hosts").read_text().startswith(before)
    assert ip["node4"] not in (folder / "known_hosts").read_text()[len(before) :]
    assert sh(cluster, "node2", "id provision >/dev/null 2>&1 || echo absent").strip() == "absent"
    assert_no_secret(result.stdout, result.stderr, folders=(tmp_path,))

    # node1's report is data: stored verbatim and inert, and a real Ansible run reading it runs nothing.
    loaded = load_inventory(inventory)
    assert loaded.hosts["node1"]["bootstrap_facts"]["os"]["pretty_name"] == planted
    assert not validate(loaded)
    ansible = [str(Path(sys.executable).parent / "ansible"), "node1", "-i", str(inventory), "-c", "local"]
    read = subprocess.run(
        [*ansible, "-m", "ansible.builtin.debug", "-a", "var=bootstrap_facts.os.pretty_name"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert read.returncode == 0, read.stdout + read.stderr
    assert planted in read.stdout
    assert not pwned.exists()

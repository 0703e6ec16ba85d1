"""What a node reports through `provision bootstrap` stays data: the interpreter path only when it is a plain
absolute path, every discovered string written ``!unsafe``, and a real ansible-playbook run on the written
inventory that reads every discovered value runs nothing on the controller."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.bootstrap.credentials import ensure_deploy_key
from provision.bootstrap.hostkeys import KnownHosts, TrustPolicy
from provision.bootstrap.node import HostResult, Options
from provision.bootstrap.run import check_inventory_path, write_inventory
from provision.bootstrap.ssh import Target
from provision.inventory.load import load_inventory

pytestmark = pytest.mark.unit

MARKER = "pwned-by-the-node"
PIPE = f"{{{{ lookup('pipe', 'touch {MARKER}') }}}}"


def _hostile_facts(python: str) -> dict[str, Any]:
    return {
        "hostname": PIPE,
        "arch": "aarch64",
        "os": {"id": "openEuler", "pretty_name": f"openEuler {PIPE}", "note": "{% raw %}x{% endraw %}"},
        "npus": {"count": 8, "model": "910B", "pci_ids": ["19e5:d802"], "bus_ids": ["0000:01:00.0"]},
        "version": "22.03",
        "flag": "yes",
        "python": {"path": python, "version": "3.9.9"},
    }


def test_bootstrap_writes_what_a_node_reports_as_inert_data(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    key = ensure_deploy_key(tmp_path / "keys" / "deploy", "provision@test")
    opts = Options(
        policy=TrustPolicy(record=KnownHosts(tmp_path / "known_hosts")),
        deploy_user="provision",
        deploy_key=key,
    )
    results = [
        HostResult(Target("node1", "10.0.0.1"), facts=_hostile_facts(f"/opt/{PIPE}/python3")),
        HostResult(Target("node2", "10.0.0.2"), facts=_hostile_facts("/usr/bin/python3")),
    ]
    update = write_inventory(inventory, results, opts, check_inventory_path(inventory))

    ini = inventory.read_text()
    assert "lookup" not in ini
    assert "node2 ansible_host=10.0.0.2" in ini and "ansible_python_interpreter=/usr/bin/python3" in ini
    assert update.problems == []
    [refused] = update.refused
    assert refused.startswith("node1: ansible_python_interpreter not written: the node reported python3 at")
    assert "not a template" in refused
    block = (tmp_path / "host_vars" / "node1.yml").read_text()
    assert "\n  hostname: !unsafe " in block and "\n    pretty_name: !unsafe " in block
    assert yaml.compose(block) is not None

    from ansible.template import is_trusted_as_template

    loaded = load_inventory(inventory)
    facts = loaded.hosts["node1"]["bootstrap_facts"]
    assert facts["hostname"] == PIPE and not is_trusted_as_template(facts["hostname"])
    # Strings that read as numbers or booleans in YAML stay the strings the node reported.
    assert (facts["npus"]["bus_ids"], facts["version"], facts["flag"]) == (["0000:01:00.0"], "22.03", "yes")
    assert "ansible_python_interpreter" not in loaded.hosts["node1"]

    # A real Ansible run that reads every discovered value: nothing runs, the values come back verbatim.
    playbook = tmp_path / "read.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  tasks:\n"
        '    - ansible.builtin.debug:\n        msg: "{{ hostvars[item].bootstrap_facts }}"\n'
        "      loop: [node1, node2]\n"
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "ANSIBLE_NOCOLOR": "1",
            "HOME": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / MARKER).exists()
    assert "lookup('pipe', 'touch pwned-by-the-node')" in done.stdout
    assert "{% raw %}x{% endraw %}" in done.stdout

"""The inventory is checked once: under plain ansible-playbook every role checks its arguments (its
meta/argument_specs.yml) and preflight re-validates the inventory on every node; under provision, which made
the same checks before contacting any host, the playbooks are told so (``provision_validated``) and skip
them. The playbooks run for real here, over local connections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.inventory.validate import VALIDATED_VARS
from provision.runner.run import ansible_env

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]


def _inventory(tmp_path: Path, variables: str) -> Path:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "inventory.ini").write_text(
        "[npu_nodes]\nnode1\nnode2\n[npu_nodes:vars]\nansible_connection=local\n"
    )
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(variables)
    return tmp_path / "inventory.ini"


def _run(inventory: Path, playbook: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(inventory),
        str(playbook),
        *args,
    ]
    env = {**os.environ, **ansible_env()}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_a_role_checks_its_arguments_unless_told_provision_did(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "npu_pools_remove_stale: maybe\n")
    pools = ROOT / "playbooks" / "pools.yml"
    plain = _run(inventory, pools, "--tags", "no_such_tag")  # only the argument check runs (tagged always)
    assert plain.returncode == 2, plain.stdout + plain.stderr
    assert "Validating arguments against arg spec 'main'" in plain.stdout
    assert "npu_pools_remove_stale" in plain.stdout and "Validation of arguments failed" in plain.stdout

    told = _run(inventory, pools, "--tags", "no_such_tag", "-e", VALIDATED_VARS)
    assert told.returncode == 0, told.stdout + told.stderr
    assert "Validating arguments" not in told.stdout
    # told in words: an extra variable of another spelling is read the same way
    assert (
        "Validating arguments"
        not in _run(inventory, pools, "--tags", "x", "-e", "provision_validated=true").stdout
    )
    assert (
        "Validating arguments"
        in _run(inventory, pools, "--tags", "x", "-e", "provision_validated=false").stdout
    )


def test_preflight_revalidates_the_inventory_unless_told_provision_did(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "ascend_driver_reboot: maybe\n")
    play = tmp_path / "check.yml"
    play.write_text(
        "- hosts: npu_nodes\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.import_role:\n        name: provision.ascend.preflight\n"
        "        tasks_from: inventory\n"
    )
    plain = _run(inventory, play)
    assert plain.returncode == 2, plain.stdout + plain.stderr
    for host in ("node1", "node2"):
        assert (
            f"Inventory problems for {host}: ascend_driver_reboot = 'maybe': must be true or false"
            in plain.stdout
        )

    told = _run(inventory, play, "-e", VALIDATED_VARS)
    assert told.returncode == 0, told.stdout + told.stderr
    assert "Inventory problems" not in told.stdout and "skipping: [node1]" in told.stdout


def test_every_role_of_the_playbooks_is_imported_with_the_switch() -> None:
    """``roles:`` cannot skip a role's argument check: every role a playbook runs is an import_role whose
    rolespec_validate reads provision_validated (a role added the other way would check twice)."""
    imported = []
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            assert "roles" not in play, f"{path.name}: {play.get('name')}: roles: (use import_role)"
            for task in play.get("tasks") or []:
                role = task.get("ansible.builtin.import_role")
                if role is not None:
                    assert (
                        role["rolespec_validate"] == "{{ not (provision_validated | default(false) | bool) }}"
                    )
                    imported.append(role["name"])
    assert json.dumps(sorted(set(imported))) == json.dumps(
        sorted(f"provision.ascend.{p.name}" for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
    )

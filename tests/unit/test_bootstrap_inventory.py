"""The INI inventory editor and the host_vars block of `provision bootstrap`: nothing of the user's is lost.

Every edited inventory is loaded back with Ansible's own loader (provision.inventory.load) and validated.
"""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.bootstrap.credentials import DeployKey, ensure_deploy_key
from provision.bootstrap.hostkeys import KnownHosts, TrustPolicy
from provision.bootstrap.inventory import (
    BEGIN,
    END,
    HostEntry,
    IniText,
    host_vars_file,
    quote_value,
    replace_block,
    update_ini,
    user_keys,
    with_known_hosts,
)
from provision.bootstrap.node import HostResult, Options
from provision.bootstrap.run import check_inventory_path, resolve_targets, write_inventory
from provision.bootstrap.ssh import Target, parse_target
from provision.errors import InputError
from provision.inventory.load import load_inventory
from provision.inventory.validate import validate

pytestmark = pytest.mark.unit

KNOWN_HOSTS = Path("/srv/lab/known_hosts")

USER_INVENTORY = """\
# Lab rack 3 -- maintained by hand, do not reorder.
[login_nodes]
gateway ansible_host=192.0.2.1   # the bastion

; old-style comment
[npu_nodes]
# Atlas 800 A2, row 3
old1 ansible_host=192.0.2.20 ansible_user=admin  # keep me

[npu_nodes:vars]
ansible_port=22

[rack3:children]
npu_nodes
"""


def connection(address: str, python: str = "/usr/bin/python3") -> dict[str, str]:
    return {
        "ansible_host": address,
        "ansible_user": "provision",
        "ansible_become": "true",
        "ansible_ssh_private_key_file": "/home/me/.ssh/provision deploy",
        "ansible_python_interpreter": python,
    }


def entry(name: str, address: str, *, model: str | None = "910B", count: int = 8) -> HostEntry:
    return HostEntry(name, connection(address), model, count, {"arch": "aarch64"})


def added_lines(before: str, after: str) -> list[str]:
    diff = difflib.ndiff(before.splitlines(), after.splitlines())
    removed = [line for line in diff if line.startswith("- ")]
    assert not removed, f"lines of the user were removed or changed: {removed}"
    return [
        line[2:] for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line.startswith("+ ")
    ]


# --- tokens and quoting ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["plain", "/path/with space", "-o UserKnownHostsFile=/x", "it's", 'say "hi"', "a#b", ""]
)
def test_quoted_values_read_back_unchanged_by_shlex(value: str) -> None:
    assert shlex.split(f"key={quote_value(value)}") == [f"key={value}"]


def test_set_vars_replaces_in_place_and_appends_before_the_comment() -> None:
    ini = IniText.parse("[g]\nh1 a=1 b='x y'   c=3  # note\n")
    index = ini.find_host("h1")
    assert index == 1
    assert ini.set_vars(index, {"b": "x y", "c": "4", "d": "new", "a": None}) == ["c", "a", "d"]
    assert ini.lines[1] == "h1 b='x y'   c=4 d=new  # note"
    assert ini.set_vars(index, {"b": "x y", "c": "4", "d": "new"}) == []


def test_known_hosts_option_is_merged_into_existing_ssh_args() -> None:
    assert with_known_hosts(None, KNOWN_HOSTS) == f"-o UserKnownHostsFile={KNOWN_HOSTS}"
    assert (
        with_known_hosts("-o ProxyJump=bastion", KNOWN_HOSTS)
        == f"-o ProxyJump=bastion -o UserKnownHostsFile={KNOWN_HOSTS}"
    )
    assert (
        with_known_hosts("-o UserKnownHostsFile=/old -o ProxyJump=b", KNOWN_HOSTS)
        == f"-o UserKnownHostsFile={KNOWN_HOSTS} -o ProxyJump=b"
    )


# --- update_ini --------------------------------------------------------------------------------------------


def test_new_inventory_file(tmp_path: Path) -> None:
    text, changes = update_ini(
        "", [entry("node1", "10.0.0.1"), entry("cpu1", "10.0.0.9", model=None, count=0)], KNOWN_HOSTS
    )
    assert changes == {
        "node1": ["added to [npu_nodes]", "added to [npu_910b]"],
        "cpu1": ["added to [nodes_without_npu]"],
    }
    path = tmp_path / "inventory.ini"
    path.write_text(text)
    inv = load_inventory(path)
    assert inv.groups["npu_nodes"] == ["node1"]
    assert inv.groups["npu_910b"] == ["node1"]
    assert inv.groups["nodes_without_npu"] == ["cpu1"]
    node1 = inv.hosts["node1"]
    assert node1["ansible_ssh_common_args"] == f"-o UserKnownHostsFile={KNOWN_HOSTS}"
    assert node1["ansible_ssh_private_key_file"] == "/home/me/.ssh/provision deploy"
    assert node1["ansible_become"] in (True, "true")
    assert text.startswith("# Ansible inventory. Hosts were added by `provision bootstrap`")


def test_users_lines_comments_and_order_survive(tmp_path: Path) -> None:
    entries = [entry("node1", "10.0.0.1"), entry("node2", "10.0.0.2")]
    text, changes = update_ini(USER_INVENTORY, entries, KNOWN_HOSTS)
    new = added_lines(USER_INVENTORY, text)
    assert new[0].startswith("node1 ansible_host=10.0.0.1 ansible_user=provision")
    assert new[1].startswith("node2 ansible_host=10.0.0.2")
    assert new[2:] == ["", "[npu_910b]", "node1", "node2"]
    lines = text.splitlines()
    assert (
        lines.index(new[0]) == lines.index("old1 ansible_host=192.0.2.20 ansible_user=admin  # keep me") + 1
    )
    assert changes["node1"] == ["added to [npu_nodes]", "added to [npu_910b]"]

    path = tmp_path / "inventory.ini"
    path.write_text(text)
    inv = load_inventory(path)
    assert sorted(inv.groups["npu_nodes"]) == ["node1", "node2", "old1"]
    assert sorted(inv.groups["rack3"]) == ["node1", "node2", "old1"]
    assert inv.hosts["gateway"]["ansible_host"] == "192.0.2.1"
    assert not validate(inv)

    again, changes = update_ini(text, entries, KNOWN_HOSTS)
    assert (again, changes) == (text, {})


def test_new_host_goes_after_the_comment_under_an_empty_section() -> None:
    before = "[npu_nodes]\n# new servers go here\n\n# Login nodes\n[login]\nl1\n"
    text, _ = update_ini(before, [entry("node1", "10.0.0.1")], KNOWN_HOSTS)
    assert text.splitlines()[:3] == ["[npu_nodes]", "# new servers go here", text.splitlines()[2]]
    assert text.splitlines()[2].startswith("node1 ")
    assert "# Login nodes\n[login]\nl1\n" in text


def test_existing_host_line_is_updated_in_place(tmp_path: Path) -> None:
    before = (
        "[rack]\n"
        "node1 ansible_host=10.9.9.9 ansible_user=root owner=team-a  # racked 2024\n"
        "[npu_nodes:children]\nrack\n"
    )
    member_of = {"node1": ["all", "rack", "npu_nodes"]}
    text, changes = update_ini(before, [entry("node1", "10.0.0.1")], KNOWN_HOSTS, member_of)
    line = text.splitlines()[1]
    assert line.startswith(
        "node1 ansible_host=10.0.0.1 ansible_user=provision owner=team-a ansible_become=true"
    )
    assert line.endswith("  # racked 2024")
    assert "[npu_nodes]" not in text  # already a member through [npu_nodes:children]
    assert changes["node1"][0].startswith("set ansible_host, ansible_user, ansible_become")
    assert changes["node1"][1:] == ["added to [npu_910b]"]
    path = tmp_path / "inventory.ini"
    path.write_text(text)
    assert load_inventory(path).hosts["node1"]["owner"] == "team-a"


def test_model_change_moves_the_host_between_model_groups() -> None:
    text, _ = update_ini("", [entry("node1", "10.0.0.1")], KNOWN_HOSTS)
    text, changes = update_ini(text, [entry("node1", "10.0.0.1", model="310P")], KNOWN_HOSTS)
    assert changes["node1"] == ["added to [npu_310p]", "removed from [npu_910b]"]
    assert "[npu_910b]\n" in text  # the section stays (it may hold comments); the host left it
    assert IniText.parse(text).groups_of("node1") == ["npu_nodes", "npu_310p"]


def test_host_in_npu_nodes_that_lost_its_npus_stays_there() -> None:
    text, _ = update_ini("", [entry("node1", "10.0.0.1")], KNOWN_HOSTS)
    _, changes = update_ini(text, [entry("node1", "10.0.0.1", model=None, count=0)], KNOWN_HOSTS)
    assert changes == {"node1": ["removed from [npu_910b]"]}


# --- host_vars -------------------------------------------------------------------------------------------


USER_HOST_VARS = """\
---
# rack position, by hand
rack_unit: 12
ascend_npu_count: 7   # one card is out for repair
"""


class _AnsibleTags(yaml.SafeLoader):
    """Reads Ansible's ``!unsafe`` (what bootstrap tags every discovered string with) as the plain string."""


_AnsibleTags.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def test_block_is_appended_and_replaced_without_touching_the_rest() -> None:
    once = replace_block(USER_HOST_VARS, {"bootstrap_facts": {"arch": "aarch64"}})
    assert once.startswith(USER_HOST_VARS)
    assert once.endswith(f"{END}\n") and BEGIN in once
    twice = replace_block(once, {"bootstrap_facts": {"arch": "aarch64"}})
    assert twice == once
    changed = replace_block(once + "extra: 1\n", {"bootstrap_facts": {"arch": "x86_64"}})
    assert changed.startswith(USER_HOST_VARS) and changed.endswith("extra: 1\n")
    data = yaml.load(changed, Loader=_AnsibleTags)
    assert data == {"rack_unit": 12, "ascend_npu_count": 7, "bootstrap_facts": {"arch": "x86_64"}, "extra": 1}
    assert user_keys(changed) == {"rack_unit", "ascend_npu_count", "extra"}
    assert replace_block("", {"a": 1}).startswith(f"---\n{BEGIN}\n")


def test_host_vars_location(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    assert host_vars_file(inventory, "n1") == tmp_path / "host_vars" / "n1.yml"
    (tmp_path / "host_vars" / "n2").mkdir(parents=True)
    assert host_vars_file(inventory, "n2") == tmp_path / "host_vars" / "n2" / "bootstrap.yml"
    (tmp_path / "host_vars" / "n3.yaml").write_text("a: 1\n")
    assert host_vars_file(inventory, "n3") == tmp_path / "host_vars" / "n3.yaml"
    (tmp_path / "host_vars" / "n4.json").write_text("{}")
    with pytest.raises(InputError, match="JSON"):
        host_vars_file(inventory, "n4")


# --- write_inventory end to end (no SSH: results as the hosts would give them) ------------------------------


def facts(count: int = 8, model: str | None = "910B") -> dict[str, Any]:
    return {
        "hostname": "n",
        "arch": "aarch64",
        "npus": {"count": count, "model": model, "pci_ids": ["19e5:d802"], "bus_ids": []},
        "python": {"path": "/usr/bin/python3", "version": "3.9.9"},
        "host_key": "SHA256:x",
    }


def options(tmp_path: Path) -> Options:
    key: DeployKey = ensure_deploy_key(tmp_path / "keys" / "deploy", "provision@test")
    return Options(
        policy=TrustPolicy(record=KnownHosts(tmp_path / "known_hosts")),
        deploy_user="provision",
        deploy_key=key,
    )


def test_write_inventory_keeps_the_users_files_and_validates(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(USER_INVENTORY)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "node1.yml").write_text(USER_HOST_VARS)
    opts = options(tmp_path)
    results = [
        HostResult(Target("node1", "10.0.0.1"), facts=facts()),
        HostResult(Target("node2", "10.0.0.2", 2222), facts=facts()),
        HostResult(Target("node3", "10.0.0.3"), error=InputError("x")),  # type: ignore[arg-type]
    ]
    member_of = check_inventory_path(inventory)
    update = write_inventory(inventory, results, opts, member_of)
    assert update.problems == []
    assert update.changes["node1"] == [
        "inventory: added to [npu_nodes]",
        "inventory: added to [npu_910b]",
        "inventory: wrote host_vars/node1.yml",
    ]
    inv = load_inventory(inventory)
    assert "node3" not in inv.hosts
    node1 = inv.hosts["node1"]
    assert node1["ascend_npu_count"] == 7  # the user's value wins; ours is not written next to it
    assert node1["rack_unit"] == 12
    assert node1["bootstrap_facts"]["arch"] == "aarch64"
    assert node1["ansible_ssh_private_key_file"] == str(opts.deploy_key.path)
    assert node1["ansible_ssh_common_args"] == f"-o UserKnownHostsFile={tmp_path / 'known_hosts'}"
    node2 = inv.hosts["node2"]
    assert (node2["ansible_port"], node2["ascend_npu_count"]) == (2222, 8)
    assert (tmp_path / "host_vars" / "node1.yml").read_text().startswith(USER_HOST_VARS)

    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    again = write_inventory(inventory, results, opts, check_inventory_path(inventory))
    assert again.changes == {}
    assert {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_bare_names_already_in_the_inventory_are_reached_at_their_address(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[npu_nodes]\nnode1 ansible_host=10.0.0.1 ansible_port=2200\n")
    targets = resolve_targets(["node1", "node2=root@10.0.0.2:22", "10.0.0.3"], inventory, 22)
    assert targets == [
        Target("node1", "10.0.0.1", 2200),
        Target("node2", "10.0.0.2", 22, "root"),
        Target("10.0.0.3", "10.0.0.3", 22),
    ]
    with pytest.raises(InputError, match="given twice"):
        resolve_targets(["node1", "node1"], inventory, 22)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("10.0.0.1", Target("10.0.0.1", "10.0.0.1")),
        ("n1=admin@10.0.0.1:2222", Target("n1", "10.0.0.1", 2222, "admin")),
        ("[fd00::1]:2200", Target("fd00::1", "fd00::1", 2200)),
        ("n2=fd00::2", Target("n2", "fd00::2")),
    ],
)
def test_host_arguments(spec: str, expected: Target) -> None:
    assert parse_target(spec) == expected


@pytest.mark.parametrize("spec", ["n1=10.0.0.1:99999", "n1=", "Bad User@10.0.0.1", "n 1=10.0.0.1"])
def test_bad_host_arguments(spec: str) -> None:
    with pytest.raises(InputError):
        parse_target(spec)


def test_yaml_inventories_are_refused_before_any_host_is_contacted(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="bootstrap writes INI inventories"):
        check_inventory_path(tmp_path / "hosts.yml")

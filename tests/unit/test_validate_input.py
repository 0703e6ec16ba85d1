"""`provision validate` on every kind of bad input: role variables typed by the roles' argument specs,
Ansible's connection variables, and the inventory's files (encoding, duplicate keys, symlinks, files Ansible
would skip). Each is exit 2 naming the file (and line), the group or host and the field; never a traceback."""

from __future__ import annotations

import os
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel

from provision.inventory import argspecs
from provision.inventory.load import load_inventory
from provision.inventory.schema import HostSettings
from provision.inventory.validate import host_issues
from tests.helpers import GOOD_INI, run_cli, write_tree

pytestmark = pytest.mark.unit

GROUP_POOL = "npu_pools_list:\n  - {name: a, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000}\n"


def refused(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of `provision validate` on the inventory under ``root``, which must be refused with exit 2."""
    inventory = _inventory_in(root)
    code = run_cli(["validate", str(inventory)], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err


def accepted(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_cli(["validate", str(_inventory_in(root))], monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "ok (" in captured.out


def _inventory_in(root: Path) -> Path:
    for name in ("inventory.ini", "inventory.yml"):
        if (root / name).exists() or (root / name).is_symlink():
            return root / name
    return root


# --- A: the roles' argument specs type every variable a role reads ---------------------------------------

WRONG_TYPES: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "bool-in-ini-group-vars",
        {"inventory.ini": GOOD_INI + "[npu_nodes:vars]\nascend_driver_reboot=maybe\n"},
        ["inventory.ini:5: group npu_nodes: ascend_driver_reboot = 'maybe': must be true or false"],
    ),
    (
        "float-in-group-vars",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "vllm_serve_poll_s: fast\n"},
        ["group_vars/npu_nodes.yml:1: group npu_nodes: vllm_serve_poll_s = 'fast': must be a number"],
    ),
    (
        "int-in-host-vars",
        {"inventory.ini": GOOD_INI, "host_vars/node2.yml": "x: 1\nvllm_serve_restart_sec: soon\n"},
        ["host_vars/node2.yml:2: host node2: vllm_serve_restart_sec = 'soon': must be a whole number"],
    ),
    (
        "int-on-ini-host-line",
        {"inventory.ini": GOOD_INI.replace("node2 ", "node2 ascend_driver_verify_retries=many ")},
        ["inventory.ini:3: host node2: ascend_driver_verify_retries = 'many': must be a whole number"],
    ),
    (
        "choices",
        {"inventory.ini": GOOD_INI, "group_vars/all.yml": "container_runtime_verify: sometimes\n"},
        [
            "group_vars/all.yml:1: group all: container_runtime_verify = 'sometimes': "
            "allowed: 'changed', 'always' or 'never'"
        ],
    ),
    (
        "choices-after-ansibles-str-conversion",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "vllm_serve_image_soc: 910\n"},
        ["vllm_serve_image_soc = 910: allowed: '910b', 'a3' or '310p'"],
    ),
    (
        "npu-line-of-the-link-check",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "hccn_gate_npu_line: a2\n"},
        [
            "group_vars/npu_nodes.yml:1: group npu_nodes: hccn_gate_npu_line = 'a2': "
            "allowed: '910b', 'a3' or '310p'"
        ],
    ),
    (
        "list-elements-by-index",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "container_runtime_verify_pools:\n  - {name: a, devices: [0]}\n"
            "  - 7\n",
        },
        [
            "group_vars/npu_nodes.yml:3: group npu_nodes: container_runtime_verify_pools[1] = 7: "
            "must be a mapping"
        ],
    ),
    (
        "list-of-mappings-given-a-string",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "npu_pools_list: chat\n"},
        ["npu_pools_list = 'chat': must be a list (each item must be a mapping)"],
    ),
    (
        "dict-given-a-list",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "ascend_driver_checksums: [abc]\n"},
        ["ascend_driver_checksums = ['abc']: must be a mapping"],
    ),
    (
        "list-given-a-mapping",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "openeuler_repos_sections: {OS: 1}\n"},
        ["openeuler_repos_sections = {'OS': 1}: must be a list"],
    ),
    (
        "yaml-inventory-group-vars",
        {
            "inventory.yml": "all:\n  children:\n    npu_nodes:\n      hosts:\n        n1: {}\n"
            "      vars:\n        cann_install_nnal: perhaps\n",
        },
        ["inventory.yml:7: group npu_nodes: cann_install_nnal = 'perhaps': must be true or false"],
    ),
]


@pytest.mark.parametrize(
    ("files", "expected"), [(f, e) for _, f, e in WRONG_TYPES], ids=[c[0] for c in WRONG_TYPES]
)
def test_role_variable_of_a_wrong_type_is_refused_like_the_roles_argument_spec_would(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    expected: list[str],
) -> None:
    write_tree(tmp_path, files)
    err = refused(tmp_path, monkeypatch, capsys)
    for text in expected:
        assert text in err, f"{text!r} not in:\n{err}"
    assert (
        "1 problem(s)" in err
    )  # one message per mistake, not one from Ansible's spec and one from the schema


def test_values_ansible_coerces_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """INI's :vars are strings ("false", "no"); Ansible's role validation reads them as bools and ints."""
    write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI
            + "[npu_nodes:vars]\ncontainer_runtime_default_runtime=false\nascend_driver_reboot=yes\n"
            "provision_allow_unlocked_versions=no\nvllm_serve_restart_sec=8\nopeneuler_repos_sections=OS,update\n",
            "group_vars/npu_nodes.yml": "vllm_serve_poll_s: '0.5'\nvllm_serve_model_reserve_mb: '512'\n"
            "cann_keep_artifacts: 'on'\nvllm_serve_profiles:\n  p: {model: /m, enforce_eager: 'yes'}\n",
        },
    )
    accepted(tmp_path, monkeypatch, capsys)


def test_templated_values_stay_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "ascend_driver_reboot: \"{{ lookup('env', 'REBOOT') }}\"\n"
            "ansible_port: '{{ site_port }}'\n",
        },
    )
    accepted(tmp_path, monkeypatch, capsys)


def test_schema_bool_reads_what_ansible_reads_and_refuses_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """provision_allow_unlocked_versions is no role's option: the schema alone types it, as Ansible would."""
    write_tree(
        tmp_path,
        {"inventory.ini": GOOD_INI + "[npu_nodes:vars]\nprovision_allow_unlocked_versions=maybe\n"},
    )
    err = refused(tmp_path, monkeypatch, capsys)
    assert (
        "inventory.ini:5: group npu_nodes: provision_allow_unlocked_versions = 'maybe': must be true or false"
        in err
    )


def test_preflight_filter_types_role_variables_with_plain_values() -> None:
    """The node side (filter provision_inventory_issues) runs the same checks on plain values."""
    assert host_issues("node1", {"ascend_driver_reboot": "maybe"}) == [
        "ascend_driver_reboot = 'maybe': must be true or false"
    ]
    assert (
        host_issues("node1", {"container_runtime_default_runtime": "false", "vllm_serve_poll_s": "0.1"}) == []
    )


# --- A: one type source: the schema and the argument specs cannot drift ------------------------------------


def _spec_of_annotation(annotation: Any) -> tuple[str, frozenset[str] | None]:
    """The Ansible type (and choices) a schema field's annotation corresponds to."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    members = typing.get_args(annotation) if union else (annotation,)
    members = tuple(m for m in members if m is not type(None))
    assert len(members) == 1, f"{annotation}: one type per field (plus None)"
    member = members[0]
    while typing.get_origin(member) is typing.Annotated:
        member = typing.get_args(member)[0]
    origin = typing.get_origin(member)
    if origin is Literal:
        return "str", frozenset(str(v) for v in typing.get_args(member))
    if origin is list:
        (item,) = typing.get_args(member)
        while typing.get_origin(item) is typing.Annotated:
            item = typing.get_args(item)[0]
        if isinstance(item, type) and issubclass(item, BaseModel):
            return "list:dict", None
        return f"list:{ {bool: 'bool', int: 'int', float: 'float', str: 'str'}[item] }", None
    if origin is dict:
        return "dict", None
    return {bool: "bool", int: "int", float: "float", str: "str"}[member], None


def test_schema_and_argument_specs_agree_on_every_role_variable() -> None:
    options = argspecs.role_options()
    shared = sorted(set(HostSettings.model_fields) & set(options))
    assert "container_runtime_default_runtime" in shared and len(shared) >= 14
    for name in shared:
        kind, choices = _spec_of_annotation(HostSettings.model_fields[name].annotation)
        spec = options[name]
        wanted = spec.get("type", "str")
        if spec.get("elements"):
            wanted = f"{wanted}:{spec['elements']}"
        compatible = {"str": {"str", "path"}, "list:dict": {"list:dict"}}.get(kind, {kind})
        assert wanted in compatible, f"{name}: schema {kind}, argument spec {wanted}"
        spec_choices = frozenset(str(c) for c in spec["choices"]) if spec.get("choices") else None
        if choices is not None or spec_choices is not None:
            assert choices == spec_choices, f"{name}: schema allows {choices}, argument spec {spec_choices}"


def test_every_role_option_is_a_variable_validate_knows() -> None:
    """An option only in an argument spec would be refused as an unknown variable."""
    known = set(HostSettings.model_fields)
    for defaults in (Path(__file__).parents[2] / "roles").glob("*/defaults/main.yml"):
        known |= set(yaml.safe_load(defaults.read_text(encoding="utf-8")) or {})
    assert set(argspecs.role_options()) <= known


# --- A: Ansible's connection variables --------------------------------------------------------------------

CONNECTION: list[tuple[str, str, str]] = [
    ("port-word", "ansible_port=twenty-two", "ansible_port = 'twenty-two': must be a whole number"),
    ("port-range", "ansible_port=70000", "ansible_port = 70000: must be less than or equal to 65535"),
    ("host-space", "ansible_host='10.0.0.1 10.0.0.2'", "must be a host name or address, without spaces"),
    ("host-empty", "ansible_host=''", "ansible_host = '': must be a host name or address"),
    ("user-empty", "ansible_user=''", "ansible_user = '': "),
    (
        "python-relative",
        "ansible_python_interpreter=python3",
        "must be an absolute path (/usr/bin/python3) or one of auto",
    ),
    ("connection-typo", "ansible_connection=sshh", "ansible_connection = 'sshh': no such connection plugin"),
    (
        "connection-of-a-missing-collection",
        "ansible_connection=no_such.collection.x",
        "ansible_connection = 'no_such.collection.x': no such connection plugin",
    ),
]


@pytest.mark.parametrize(
    ("words", "expected"), [(w, e) for _, w, e in CONNECTION], ids=[c[0] for c in CONNECTION]
)
def test_bad_connection_variable_is_refused_naming_host_and_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    words: str,
    expected: str,
) -> None:
    write_tree(
        tmp_path, {"inventory.ini": GOOD_INI.replace("node2 ansible_host=192.0.2.12", f"node2 {words}")}
    )
    err = refused(tmp_path, monkeypatch, capsys)
    assert "inventory.ini:3: host node2: " in err
    assert expected in err


def test_connection_variables_ansible_accepts_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\n"
            "node1 ansible_host=node1.lan ansible_port=2222 ansible_user=1000 ansible_connection=local\n"
            "node2 ansible_python_interpreter=auto_silent ansible_connection=ansible.builtin.ssh\n"
            "node3 ansible_python_interpreter='/usr/bin/env python3' ansible_connection=smart\n",
        },
    )
    accepted(tmp_path, monkeypatch, capsys)


# --- B: the inventory's files ------------------------------------------------------------------------------


def write_bytes(root: Path, name: str, data: bytes) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


NOT_UTF8: list[tuple[str, str, str]] = [
    (
        "group-vars-yml",
        "group_vars/npu_nodes.yml",
        "group_vars/npu_nodes.yml:2: not UTF-8 text: byte 0xff at offset 20",
    ),
    (
        "host-vars-json",
        "host_vars/node1.json",
        "host_vars/node1.json:2: not UTF-8 text: byte 0xff at offset 20",
    ),
    (
        "file-in-group-folder",
        "group_vars/npu_nodes/b.yml",
        "group_vars/npu_nodes/b.yml:2: not UTF-8 text: byte 0xff at offset 20",
    ),
    ("the-inventory-itself", "inventory.ini", "inventory.ini:2: not UTF-8 text: byte 0xff at offset 20"),
]


@pytest.mark.parametrize(("name", "expected"), [(n, e) for _, n, e in NOT_UTF8], ids=[c[0] for c in NOT_UTF8])
def test_file_that_is_not_utf8_is_refused_naming_file_line_and_offset(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    expected: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI})
    line_1 = b"[npu_nodes]\nnode1 x=" if name == "inventory.ini" else b"ascend_npu_count: 8\n"  # 20 bytes
    write_bytes(tmp_path, name, line_1 + b"\xff\xfe\n")
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err
    assert "save it as UTF-8" in err


DUPLICATES: list[tuple[str, dict[str, str], str]] = [
    (
        "yaml-group-vars",
        {
            "group_vars/npu_nodes.yml": "ascend_npu_count: 8\nvllm_serve_mode: container\n"
            "ascend_npu_count: 4\n"
        },
        "group_vars/npu_nodes.yml:3: duplicate key 'ascend_npu_count' (first at line 1)",
    ),
    (
        "nested-key",
        {"group_vars/npu_nodes.yml": "vllm_serve_profiles:\n  p:\n    model: /a\n    model: /b\n"},
        "group_vars/npu_nodes.yml:4: duplicate key 'model' (first at line 3)",
    ),
    (
        "json-host-vars",
        {"host_vars/node1.json": '{\n  "ascend_npu_count": 8,\n  "ascend_npu_count": 4\n}\n'},
        "host_vars/node1.json:3: duplicate key 'ascend_npu_count' (first at line 2)",
    ),
    (
        "file-in-group-folder",
        {"group_vars/npu_nodes/main.yml": "cann_chip: 910b\ncann_chip: 910c\n"},
        "group_vars/npu_nodes/main.yml:2: duplicate key 'cann_chip' (first at line 1)",
    ),
    (
        "yaml-inventory",
        {
            "inventory.yml": "all:\n  children:\n    npu_nodes:\n      hosts:\n        n1:\n"
            "          ascend_npu_count: 8\n          ascend_npu_count: 4\n",
        },
        "inventory.yml:7: duplicate key 'ascend_npu_count' (first at line 6)",
    ),
]


@pytest.mark.parametrize(
    ("files", "expected"), [(f, e) for _, f, e in DUPLICATES], ids=[c[0] for c in DUPLICATES]
)
def test_duplicate_key_is_refused_naming_the_key_and_both_lines(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    expected: str,
) -> None:
    write_tree(tmp_path, files if "inventory.yml" in files else {"inventory.ini": GOOD_INI, **files})
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err
    assert "Ansible would keep only this one" in err
    assert "Using last defined value only" not in err  # Ansible's own warning is not shown on top


FOLDERS = {"group_vars/npu_nodes/a.yml": "x: 1\n", "group_vars/all/a.yml": "y: 1\n"}
# (case id, other files, the link, where it points, what the error says)
LINKS: list[tuple[str, dict[str, str], str, str, str]] = [
    ("loop", {}, "group_vars/npu_nodes.yml", "npu_nodes.yml", "group_vars/npu_nodes.yml: is a symlink loop"),
    (
        "dangling",
        {},
        "host_vars/node1.yml",
        "gone.yml",
        "host_vars/node1.yml: is a dangling symlink: it points to gone.yml",
    ),
    (
        "in-group-folder",
        FOLDERS,
        "group_vars/npu_nodes/b.yml",
        "../x.yml",
        "group_vars/npu_nodes/b.yml: is a dangling",
    ),
    ("group-vars-folder", {}, "group_vars", "/nonexistent/vars", "group_vars: is a dangling symlink"),
    ("folder-loop", FOLDERS, "group_vars/all/again", "..", "group_vars/all/again: is a symlink loop"),
]


@pytest.mark.parametrize(
    ("files", "link", "target", "expected"), [c[1:] for c in LINKS], ids=[c[0] for c in LINKS]
)
def test_broken_symlink_among_the_vars_files_is_refused_naming_the_link(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    link: str,
    target: str,
    expected: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, **files})
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, tmp_path / link)
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_inventory_path_that_is_a_broken_symlink_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    link = tmp_path / "inventory.ini"
    os.symlink("inventory.ini" if kind == "loop" else "racks/a.ini", link)
    err = refused(tmp_path, monkeypatch, capsys)
    if kind == "loop":
        assert f"{link}: the inventory is a symlink loop (inventory.ini -> inventory.ini)" in err
    else:
        assert (
            f"{link}: the inventory is a dangling symlink: it points to racks/a.ini, which does not exist"
            in err
        )
    assert "inventory not found" not in err


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        ("group_vars/npu_nodes.yml", "- ascend_npu_count: 8\n", "a list"),
        ("group_vars/npu_nodes.yml", "ascend_npu_count\n", "a single value"),
        ("host_vars/node1.json", '["ascend_npu_count", 8]\n', "a list"),
        ("group_vars/npu_nodes/b.yml", "- a\n- b\n", "a list"),
    ],
    ids=["yaml-list", "yaml-scalar", "json-list", "file-in-group-folder"],
)
def test_vars_file_that_is_not_a_mapping_is_refused_naming_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    kind: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, name: text})
    err = refused(tmp_path, monkeypatch, capsys)
    assert f"{name}:1: must be a mapping of variable names to values, not {kind}" in err, err
    assert "_AnsibleTagged" not in err


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "group_vars/npu_node.yml",
            "group_vars/npu_node.yml: no group npu_node in the inventory; did you mean npu_nodes?",
        ),
        (
            "group_vars/npu_node.json",
            "group_vars/npu_node.json: no group npu_node in the inventory; did you mean npu_nodes?",
        ),
        (
            "group_vars/npu_node/a.yml",
            "group_vars/npu_node: no group npu_node in the inventory; did you mean npu_nodes?",
        ),
        (
            "group_vars/racks",
            "group_vars/racks: no group racks in the inventory; Ansible never reads this file",
        ),
        ("host_vars/nod1.yml", "host_vars/nod1.yml: no host nod1 in the inventory; did you mean node1?"),
    ],
    ids=["yml", "json", "folder", "no-extension", "host"],
)
def test_vars_file_for_a_group_or_host_not_in_the_inventory_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    expected: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, name: GROUP_POOL})
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err


def test_vars_files_ansible_reads_or_ignores_on_purpose_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """all, ungrouped and the implicit localhost are always there; README.md, backups and hidden files are
    not vars files."""
    write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI,
            "group_vars/all": "provision_stack: '0.23.0'\n",
            "group_vars/ungrouped.yml": "{}\n",
            "group_vars/npu_nodes/pools.yml": "ascend_npu_count: 8\n",
            "group_vars/npu_nodes/README.md": "- not: [yaml\n",
            "group_vars/README.md": "# notes\n",
            "group_vars/npu_nodes.yml~": "- backup\n",
            "group_vars/.hidden.yml": "- hidden\n",
            "host_vars/localhost.yml": "x: 1\n",
            "host_vars/node1.yml": "",
        },
    )
    accepted(tmp_path, monkeypatch, capsys)


def test_second_vars_entry_for_the_same_group_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes/a.yml": "ascend_npu_count: 8\n",
            "group_vars/npu_nodes.yml": GROUP_POOL,
            "host_vars/node1.yml": "x: 1\n",
            "host_vars/node1.yaml": "y: 1\n",
        },
    )
    err = refused(tmp_path, monkeypatch, capsys)
    assert (
        "group_vars/npu_nodes.yml: never read: Ansible reads only group_vars/npu_nodes for group npu_nodes"
        in err
    )
    assert "host_vars/node1.yaml: never read: Ansible reads only host_vars/node1.yml for host node1" in err


def test_inventory_folder_is_checked_like_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(
        tmp_path,
        {"hosts.ini": GOOD_INI, "group_vars/npu_nodes.yml": "ascend_npu_count: 8\n"},
    )
    accepted(tmp_path, monkeypatch, capsys)
    write_tree(tmp_path, {"group_vars/npu_node.yml": GROUP_POOL})
    err = refused(tmp_path, monkeypatch, capsys)
    assert "group_vars/npu_node.yml: no group npu_node in the inventory; did you mean npu_nodes?" in err


def test_bootstrap_loads_an_inventory_with_host_vars_of_hosts_it_is_about_to_add(tmp_path: Path) -> None:
    """Only validate refuses vars files for unknown hosts, not loading: bootstrap reads the inventory before
    it adds a host whose host_vars the user wrote first."""
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, "host_vars/node9.yml": "ascend_npu_count: 8\n"})
    assert set(load_inventory(tmp_path / "inventory.ini").hosts) == {"node1", "node2"}


@pytest.mark.parametrize(
    "count_line",
    [
        (
            "host_vars/node1.yml",
            "ascend_npu_count: 4\n",
            "host_vars/node1.yml:1: host node1: ascend_npu_count = 4",
        ),
        (
            "inventory.ini",
            GOOD_INI.replace("node1 ", "node1 ascend_npu_count=4 "),
            "inventory.ini:2: host node1: ",
        ),
    ],
    ids=["host-vars", "ini-host-line"],
)
def test_group_pool_beyond_a_hosts_own_npu_count_is_one_problem_for_the_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    count_line: tuple[str, str, str],
) -> None:
    name, text, expected = count_line
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GROUP_POOL, name: text})
    err = refused(tmp_path, monkeypatch, capsys)
    assert "1 problem(s)" in err, err
    assert expected in err
    assert "pool 'a' of group npu_nodes uses NPU 4, 5, 6, 7, beyond this count (ids 0-3)" in err
    assert "group npu_nodes: npu_pools_list" not in err  # not blamed on the group, right for node2


@pytest.mark.parametrize(
    "files",
    [
        {"inventory.ini": "\x00\x01binary"},
        {"inventory.ini": GOOD_INI, "group_vars": "not a folder\n"},
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes/x.yml": "a: [\n"},
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "a: !!python/object:os.system {}\n"},
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "---\na: 1\n---\nb: 2\n"},
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "npu_pools_list: {name: a}\n"},
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "npu_pools_list: [[1]]\nvllm_serve_profiles: 3\n",
        },
        {"inventory.yml": "all:\n  hosts: [a, b]\n"},
    ],
    ids=[
        "binary",
        "group-vars-file",
        "yaml-in-folder",
        "python-tag",
        "two-documents",
        "pools-mapping",
        "nested-junk",
        "yaml-hosts-list",
    ],
)
def test_odd_input_is_exit_2_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], files: dict[str, str]
) -> None:
    write_tree(tmp_path, files)
    err = refused(tmp_path, monkeypatch, capsys)
    assert str(tmp_path) in err or "inventory" in err


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"inventory.yml": "all:\n  children:\n    npu_nodes:\n      hosts: [\n"},
            "a valid Ansible inventory: inventory.yml:5: invalid YAML: did not find expected node content",
        ),
        (
            {
                "inventory.ini": GOOD_INI,
                "group_vars/npu_nodes/a.yml": "x: 1\n",
                "group_vars/npu_nodes/b.yml": "y: [\n",
            },
            "group_vars/npu_nodes/b.yml:2: YAML parsing failed",
        ),
    ],
    ids=["yaml-inventory", "file-in-group-folder"],
)
def test_yaml_syntax_error_names_the_file_and_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    expected: str,
) -> None:
    write_tree(tmp_path, files)
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err


def test_inventory_folder_with_a_symlink_back_up_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ansible would read every inventory file again through the link, level after level."""
    write_tree(tmp_path, {"inventory/hosts.ini": GOOD_INI})
    os.symlink("..", tmp_path / "inventory" / "up")
    err = refused(tmp_path / "inventory", monkeypatch, capsys)
    assert "up: is a symlink loop: it leads back to a folder above it" in err


# --- verified supply: sha256 pins and the openEuler key's fingerprint ----------------------------------

SUPPLY_PINS: list[tuple[str, str, str]] = [
    (
        "short-sha256",
        "ascend_driver_checksums: {'Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run': 'abc123'}\n",
        "group_vars/npu_nodes.yml:1: group npu_nodes: "
        "ascend_driver_checksums.Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run = 'abc123': "
        "must look like 64 hex digits (sha256sum's first column)",
    ),
    (
        "md5-not-sha256",
        "cann_checksums:\n  Ascend-cann-toolkit_9.1.0_linux-aarch64.run: d41d8cd98f00b204e9800998ecf8427e\n",
        "cann_checksums.Ascend-cann-toolkit_9.1.0_linux-aarch64.run = 'd41d8cd98f00b204e9800998ecf8427e': "
        "must look like 64 hex digits",
    ),
    (
        "fingerprint-too-short",
        "openeuler_repos_gpg_key_fingerprint: 'ABCD 1234'\n",
        "group_vars/npu_nodes.yml:1: group npu_nodes: openeuler_repos_gpg_key_fingerprint = 'ABCD 1234': "
        "must be a key fingerprint: 40 hex digits, as gpg --fingerprint prints them",
    ),
    (
        "fingerprint-a-key-id",
        "openeuler_repos_gpg_key_fingerprint: 'B25E7F66'\n",
        "openeuler_repos_gpg_key_fingerprint = 'B25E7F66': must be a key fingerprint",
    ),
]


@pytest.mark.parametrize(
    ("group_vars", "expected"), [(g, e) for _, g, e in SUPPLY_PINS], ids=[c[0] for c in SUPPLY_PINS]
)
def test_a_malformed_pin_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    group_vars: str,
    expected: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": group_vars})
    err = refused(tmp_path, monkeypatch, capsys)
    assert expected in err, err
    assert "1 problem(s)" in err


def test_well_formed_pins_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    group_vars = (
        f"ascend_driver_checksums: {{'Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run': '{'A1' * 32}'}}\n"
        "openeuler_repos_gpg_key_fingerprint: '0123 4567 89AB CDEF 0123  4567 89AB CDEF 0123 4567'\n"
    )
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": group_vars})
    accepted(tmp_path, monkeypatch, capsys)

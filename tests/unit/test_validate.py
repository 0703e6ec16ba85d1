"""`provision validate` / `apply` on broken inventories: exit 2, file/scope/field named, no host contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.cli import _playbook
from tests.helpers import API_KEY_VARS, GOOD_INI, TEST_API_KEY, run_cli, write_tree

pytestmark = pytest.mark.unit

GOOD_POOLS = """\
npu_pools_list:
  - name: chat
    devices: [0, 1, 2, 3]
    port: 8000
  - name: batch
    devices: [4, 5, 6, 7]
    port: 8001
"""


MULTINODE_POOL = """\
npu_pools_list:
  - name: ds
    devices: [0, 1, 2, 3, 4, 5, 6, 7]
    port: 8000
    profile: deepseek-r1-w8a8-2node
"""

# (case id, files, substrings the error output must contain)
BROKEN: list[tuple[str, dict[str, str], list[str]]] = [
    (
        "device-out-of-range",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "npu_pools_list:\n  - {name: chat, devices: [0, 8], port: 8000}\n",
        },
        ["group_vars/npu_nodes.yml:2", "group npu_nodes", "npu_pools_list[0].devices[1] = 8", "ids 0-7"],
    ),
    (
        "device-in-two-pools",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": GOOD_POOLS.replace("[4, 5, 6, 7]", "[3, 4, 5, 6]"),
        },
        ["group_vars/npu_nodes.yml:6", "npu_pools_list[1].devices[0] = 3", "already in pool 'chat'"],
    ),
    (
        "duplicate-port",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GOOD_POOLS.replace("8001", "8000")},
        ["group_vars/npu_nodes.yml:7", "npu_pools_list[1].port = 8000", "port already used by pool 'chat'"],
    ),
    (
        "port-out-of-range",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GOOD_POOLS.replace("8001", "80")},
        ["npu_pools_list[1].port = 80", "greater than or equal to 1024"],
    ),
    (
        "bad-pool-name",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GOOD_POOLS.replace("batch", "Batch Pool")},
        ["npu_pools_list[1].name = 'Batch Pool'", "lower case"],
    ),
    (
        "empty-devices",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "npu_pools_list:\n  - {name: a, devices: [], port: 8000}\n",
        },
        ["npu_pools_list[0].devices = []", "at least 1 item"],
    ),
    (
        "unknown-pool-field",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GOOD_POOLS + "    size: 4\n"},
        ["npu_pools_list[1].size = 4", "unknown field"],
    ),
    (
        "misspelt-variable",
        {"inventory.ini": GOOD_INI, "group_vars/all.yml": "npu_pool_list: []\n"},
        ["group_vars/all.yml:1", "group all", "npu_pool_list = []", "did you mean 'npu_pools_list'"],
    ),
    (
        "cann-version-float",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "cann_version: 9.1\n"},
        ["cann_version = 9.1", "must be a string"],
    ),
    (
        "driver-version-garbage",
        {"inventory.ini": GOOD_INI, "host_vars/node2.yml": "ascend_driver_version: latest\n"},
        ["host_vars/node2.yml:1", "host node2", "ascend_driver_version = 'latest'", "25.0.rc1.1"],
    ),
    (
        "version-not-in-lock",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "cann_version: '8.2.RC1'\n"},
        ["cann_version = '8.2.RC1'", "pins cann 9.1.0", "provision_allow_unlocked_versions"],
    ),
    (
        "unknown-stack",
        {"inventory.ini": GOOD_INI, "group_vars/all.yml": "provision_stack: '0.9.0'\n"},
        ["provision_stack = '0.9.0'", "not in the version lock", "0.23.0"],
    ),
    (
        "mirror-url-no-scheme",
        {"inventory.ini": GOOD_INI, "group_vars/all.yml": "provision_mirror_url: mirror.local/ascend\n"},
        ["provision_mirror_url = 'mirror.local/ascend'", "http://, https:// or file://"],
    ),
    (
        "os-mirror-url-no-host",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/all.yml": "openeuler_repos_mirror_url: 'http:///openeuler'\n",
        },
        ["openeuler_repos_mirror_url", "must name a host"],
    ),
    (
        "npu-count-inline-ini",
        {"inventory.ini": GOOD_INI.replace("node2 ansible_host=192.0.2.12", "node2 ascend_npu_count=32")},
        ["inventory.ini:3", "host node2", "ascend_npu_count = 32", "less than or equal to 16"],
    ),
    (
        "no-npu-nodes-group",
        {"inventory.ini": "[servers]\nnode1\n"},
        ["inventory.ini", "group npu_nodes", "missing or empty"],
    ),
    (
        "invalid-group-name",
        {"inventory.ini": GOOD_INI + "\n[rack-a]\nnode1\n"},
        ["group rack-a", "invalid group name"],
    ),
    (
        "unknown-profile",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "npu_pools_list:\n"
            "  - {name: chat, devices: [0], port: 8000, profile: nope}\n",
        },
        ["npu_pools_list[0].profile = 'nope'", "unknown serving profile"],
    ),
    (
        "profile-does-not-fit-pool",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": GOOD_POOLS.replace("port: 8000", "port: 8000\n    profile: big")
            + "vllm_serve_profiles:\n  big: {model: /models/x, tensor_parallel_size: 8}\n",
        },
        ["npu_pools_list[0].profile = 'big'", "TP x DP x PP = 8 x 1 x 1 = 8", "the pool gives 4"],
    ),
    (
        "quantization-without-weights",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": "vllm_serve_profiles:\n  q: {model: /m, quantization: ascend}\n",
        },
        ["vllm_serve_profiles.q.quantization = 'ascend'", "weights_quantization"],
    ),
    (
        "yaml-inventory",
        {
            "inventory.yml": "all:\n  children:\n    npu_nodes:\n      hosts:\n        n1:\n"
            "          ascend_npu_count: eight\n",
        },
        ["inventory.yml:6", "host n1", "ascend_npu_count = 'eight'", "whole number"],
    ),
    (
        "ini-syntax-error",
        {"inventory.ini": "[npu_nodes\nnode1\n"},
        ["inventory.ini", "not a valid Ansible inventory"],
    ),
    (
        # Multi-node: a 2-node profile's pool must be on a multiple of 2 hosts of npu_nodes,
        # grouped as at run time (provision.inventory.groups).
        "multinode-pool-on-odd-hosts",
        {
            "inventory.ini": GOOD_INI + "node3 ansible_host=192.0.2.13\n",
            "group_vars/npu_nodes.yml": MULTINODE_POOL,
        },
        [
            "group_vars/npu_nodes.yml:5",
            "group npu_nodes",
            "npu_pools_list[0].profile = 'deepseek-r1-w8a8-2node'",
            "pool ds (profile deepseek-r1-w8a8-2node, 2 nodes per instance) is defined on 3 host(s) "
            "(node1, node2, node3): not a multiple of 2",
        ],
    ),
    (
        "multinode-pool-on-one-host-of-two",
        {
            "inventory.ini": GOOD_INI,
            "host_vars/node2.yml": MULTINODE_POOL,
        },
        [
            "host_vars/node2.yml:5",
            "host node2",
            "npu_pools_list[0].profile = 'deepseek-r1-w8a8-2node'",
            "is defined on 1 host(s) (node2): not a multiple of 2",
        ],
    ),
    (
        "multinode-members-disagree",
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": MULTINODE_POOL,
            "host_vars/node2.yml": "vllm_serve_profiles:\n  deepseek-r1-w8a8-2node:\n    model: /elsewhere\n"
            "    nodes: 2\n    tensor_parallel_size: 4\n    data_parallel_size: 4\n",
        },
        [
            "host_vars/node2.yml:3: host node2: vllm_serve_profiles.deepseek-r1-w8a8-2node = ",
            "group_vars/npu_nodes.yml:5: group npu_nodes: npu_pools_list[0].profile",
            "pool ds: node2 and node1 see profile deepseek-r1-w8a8-2node or the pool's NPU count differently",
        ],
    ),
    (
        "broken-group-vars-yaml",
        {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "npu_pools_list: [\n"},
        ["inventory.ini", "npu_nodes.yml"],
    ),
]


@pytest.mark.parametrize(("files", "expected"), [(f, e) for _, f, e in BROKEN], ids=[c[0] for c in BROKEN])
def test_broken_inventory_exits_2_naming_file_scope_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    files: dict[str, str],
    expected: list[str],
) -> None:
    inventory = write_tree(tmp_path, files)
    contacted: list[object] = []
    monkeypatch.setattr(_playbook, "run_playbook", lambda *a, **k: contacted.append(a))

    assert run_cli(["validate", str(inventory)], monkeypatch) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, f"{text!r} not in:\n{err}"
    assert "Traceback" not in err

    # apply refuses the same inventory before any host is contacted
    assert run_cli(["apply", str(inventory)], monkeypatch) == 2
    assert contacted == []


def test_all_problems_are_reported_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI,
            "group_vars/npu_nodes.yml": GOOD_POOLS.replace("[4, 5, 6, 7]", "[3, 9]").replace("8001", "8000")
            + "cann_version: 9\nnpu_pool_list: []\n",
        },
    )
    assert run_cli(["validate", str(inventory)], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "5 problem(s)" in err
    for text in ("devices[0] = 3", "devices[1] = 9", "port = 8000", "cann_version", "npu_pool_list"):
        assert text in err


def test_group_variable_wrong_for_many_hosts_is_reported_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = "".join(f"node{i}\n" for i in range(10))
    inventory = write_tree(
        tmp_path,
        {"inventory.ini": f"[npu_nodes]\n{hosts}", "group_vars/npu_nodes.yml": "cann_version: '1'\n"},
    )
    assert run_cli(["validate", str(inventory)], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "1 problem(s)" in err
    assert err.count("cann_version") == 1


def test_valid_inventory_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = write_tree(tmp_path, {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": GOOD_POOLS})
    assert run_cli(["validate", str(inventory)], monkeypatch) == 0
    assert "ok (2 host(s)" in capsys.readouterr().out


def test_multinode_pool_on_whole_groups_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four hosts make two 2-node groups; a single-node host without the pool is not counted."""
    inventory = write_tree(
        tmp_path,
        {
            "inventory.ini": GOOD_INI + "node3\nnode4\nlonely\n",
            "group_vars/npu_nodes.yml": MULTINODE_POOL + API_KEY_VARS,
            "host_vars/lonely.yml": "npu_pools_list: []\n",
        },
    )
    assert run_cli(["validate", str(inventory)], monkeypatch) == 0, capsys.readouterr().err


def test_shipped_example_inventory_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    example = Path(__file__).parents[2] / "examples" / "inventory.ini"
    assert run_cli(["validate", str(example)], monkeypatch) == 0


def test_missing_inventory_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["validate", str(tmp_path / "nope.ini")], monkeypatch) == 2
    assert "nope.ini: inventory not found" in capsys.readouterr().err


def test_play_keyword_variable_in_inventory_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = write_tree(
        tmp_path, {"inventory.ini": GOOD_INI, "group_vars/all.yml": "ascend_driver_serial: 1\n"}
    )
    assert run_cli(["validate", str(inventory)], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "group_vars/all.yml:1: group all: ascend_driver_serial = 1: a play keyword" in err
    assert "-e ascend_driver_serial=N" in err


@pytest.mark.unit
def test_preflight_filter_accepts_the_tagged_values_ansible_hands_it() -> None:
    """Inside a play, group_vars integers are ansible-core's tagged ints; strict fields must accept them."""
    from ansible._internal._datatag._tags import Origin

    from provision.inventory.validate import host_issues

    origin = Origin(path="/inv/group_vars/npu_nodes.yml", line_num=3)
    pool = {
        "name": origin.tag("chat"),
        "devices": [origin.tag(0)],
        "port": origin.tag(8000),
        "profile": origin.tag("chat-32b-tp8"),
    }
    pool["devices"] = [origin.tag(i) for i in range(8)]
    assert type(pool["port"]) is not int  # really the tagged type, or this test proves nothing
    key = {"vllm_serve_api_key": origin.tag(TEST_API_KEY)}  # served on node1's address: it needs one
    assert host_issues("node1", {"npu_pools_list": [pool], **key}) == []
    bad = {**pool, "port": origin.tag("eighty")}
    assert host_issues("node1", {"npu_pools_list": [bad], **key}) == [
        "npu_pools_list[0].port = 'eighty': must be a whole number"
    ]

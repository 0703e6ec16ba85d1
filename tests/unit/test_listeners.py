"""Closed by default: engines beyond loopback need an API key (or an explicit opt-out), refused by
`provision validate` (exit 2, file, scope, field), by the preflight filter and by the vllm_serve role's
filter; listeners default to the node's management address; `provision serve key` writes the key into the
inventory."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.inventory import listen
from provision.inventory.validate import host_issues
from provision.runner.run import RunResult, ServedEndpoint
from tests.helpers import load_module, run_cli, write_tree

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]

INI = "[npu_nodes]\nnode1 ansible_host=192.0.2.11\nnode2 ansible_host=192.0.2.12\n"
SERVED = (
    "npu_pools_list: [{name: chat, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, profile: chat-32b-tp8}]\n"
)
KEY_FILE = "group_vars/npu_nodes/vllm_serve_api_key.yml"


# ------------------------------------------------------------------------------------------- the decisions


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("192.0.2.11", "192.0.2.11"),
        ("fd00::5", "fd00::5"),
        ("[fd00::5]", "fd00::5"),
        ("127.0.0.1", "127.0.0.1"),
        ("atlas-a01.lan", "0.0.0.0"),  # a name is not resolved: on the node it may be another NIC
        ("localhost", "0.0.0.0"),
        ("", "0.0.0.0"),
        (None, "0.0.0.0"),
    ],
)
def test_the_management_address_is_an_ip_literal_else_every_address(
    address: str | None, expected: str
) -> None:
    assert listen.management_address(address) == expected


@pytest.mark.parametrize(
    ("bind", "is_loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.0.2.11", False),
        ("node1.lan", False),
    ],
)
def test_only_loopback_counts_as_closed(bind: str, is_loopback: bool) -> None:
    assert listen.loopback(bind) is is_loopback


@pytest.mark.parametrize(
    ("bind", "local"),
    [("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("", "127.0.0.1"), ("10.0.0.5", "10.0.0.5")],
)
def test_the_node_reaches_its_own_listener_where_it_is_bound(bind: str, local: str) -> None:
    assert listen.local_address(bind) == local


# ------------------------------------------------------------------------------------------- validate


def _validate(tmp_path: Path, files: dict[str, str], monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    inventory = write_tree(tmp_path, {"inventory.ini": INI, **files})
    return run_cli(["validate", str(inventory), *args], monkeypatch)


def test_a_default_serving_inventory_without_a_key_is_refused_saying_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _validate(tmp_path, {"group_vars/npu_nodes.yml": SERVED}, monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "1 problem(s) in the inventory; no host was contacted" in err, "one problem for the group"
    assert (
        "group_vars/npu_nodes.yml:1: group npu_nodes: vllm_serve_api_key: the engines would listen on the "
        "node's address (ansible_host, vllm_serve_bind_host's default) without an API key" in err
    ), err
    assert "provision serve key INVENTORY --vault-password-file FILE" in err
    assert "bind them to 127.0.0.1 (vllm_serve_bind_host)" in err
    assert "vllm_serve_allow_unauthenticated: true" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ("vllm_serve_bind_host: 0.0.0.0\n", "every address of the node (0.0.0.0)"),
        ("vllm_serve_bind_host: '::'\n", "every address of the node (::)"),
        ("vllm_serve_bind_host: 192.0.2.50\n", "listen on 192.0.2.50 without"),
        ("vllm_serve_api_key: ''\n", "vllm_serve_api_key = ''"),
        ("vllm_serve_allow_unauthenticated: false\n", "node's address (ansible_host"),
    ],
)
def test_every_address_but_loopback_needs_a_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    where: str,
) -> None:
    assert _validate(tmp_path, {"group_vars/npu_nodes.yml": SERVED + extra}, monkeypatch) == 2
    assert where in " ".join(capsys.readouterr().err.split())


def test_a_host_reached_by_name_is_refused_for_every_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"inventory.ini": "[npu_nodes]\natlas-a01.lan\n", "group_vars/npu_nodes.yml": SERVED}
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 2
    assert "every address of the node (0.0.0.0, vllm_serve_bind_host's default" in " ".join(
        capsys.readouterr().err.split()
    )


@pytest.mark.parametrize(
    "extra",
    [
        "vllm_serve_api_key: s3cret\n",
        "vllm_serve_allow_unauthenticated: true\n",
        "vllm_serve_allow_unauthenticated: 'yes'\n",  # Ansible's booleans, as INI gives them
        "vllm_serve_bind_host: 127.0.0.1\n",
        "vllm_serve_bind_host: localhost\n",
        "vllm_serve_bind_host: '::1'\n",
        # templated: judged by the role once Ansible has templated it
        "vllm_serve_bind_host: '{{ ansible_host }}'\n",
        "vllm_serve_api_key: \"{{ lookup('env', 'PROVISION_API_KEY') }}\"\n",
    ],
)
def test_a_key_an_opt_out_loopback_or_a_templated_value_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: str
) -> None:
    assert _validate(tmp_path, {"group_vars/npu_nodes.yml": SERVED + extra}, monkeypatch) == 0, (
        capsys.readouterr().err
    )


def test_a_node_reached_on_loopback_binds_there_by_default_and_needs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "inventory.ini": "[npu_nodes]\nnode1 ansible_host=127.0.0.1\n",
        "group_vars/npu_nodes.yml": SERVED,
    }
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 0, capsys.readouterr().err


def test_pools_without_a_profile_serve_nothing_and_need_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools = "npu_pools_list: [{name: chat, devices: [0], port: 8000}]\n"
    assert _validate(tmp_path, {"group_vars/npu_nodes.yml": pools}, monkeypatch) == 0


def test_the_preflight_filter_applies_the_same_rule() -> None:
    """plugins/filter/provision.py hands the preflight role's check the host's variables and ansible_host."""
    filters = load_module("_listen_provision_filters", ROOT / "plugins" / "filter" / "provision.py")
    pools = yaml.safe_load(SERVED)
    hostvars = {"inventory_hostname": "node1", "ansible_host": "192.0.2.11", **pools}
    (problem,) = filters.provision_inventory_issues(hostvars)
    assert problem.startswith("vllm_serve_api_key: the engines would listen on the node's address"), problem
    assert filters.provision_inventory_issues({**hostvars, "ansible_host": "127.0.0.1"}) == []
    assert host_issues("node1", {**pools, "vllm_serve_api_key": "k"}) == []


def test_the_roles_filter_judges_the_templated_bind_address() -> None:
    filters = load_module("_listen_vllm_serve_filters", ROOT / "plugins" / "filter" / "vllm_serve.py")
    refuse = filters.vllm_serve_open_engine
    assert refuse("192.0.2.11", False, False).startswith("the engines would listen on 192.0.2.11 without")
    assert "every address of the node (0.0.0.0)" in refuse("0.0.0.0", False, "false")
    assert refuse("192.0.2.11", True, False) == ""
    assert refuse("192.0.2.11", False, "true") == ""
    assert refuse("127.0.0.1", False, False) == ""
    defaults = yaml.safe_load((ROOT / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text())
    assert defaults["vllm_serve_allow_unauthenticated"] is False
    assert "provision_listen_address" in defaults["vllm_serve_bind_host"]
    assert defaults["vllm_serve_ready_bind"] == "{{ vllm_serve_bind_host }}"
    monitoring = yaml.safe_load((ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    assert "provision_listen_address" in monitoring["monitoring_npu_exporter_ip"]


# ------------------------------------------------------------------------------------------- serve key


def test_serve_key_writes_a_private_key_file_that_validate_then_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = write_tree(tmp_path, {"inventory.ini": INI, "group_vars/all.yml": SERVED})
    assert run_cli(["serve", "key", str(inventory)], monkeypatch) == 0
    out = capsys.readouterr()
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = yaml.safe_load(path.read_text())["vllm_serve_api_key"]
    assert len(key) == 43 and key.replace("-", "").replace("_", "").isalnum(), "256 random bits, URL-safe"
    assert key not in out.out + out.err, "the key is never printed"
    assert f"{path}: a new API key of group npu_nodes (mode 0600)" in out.out
    assert "warning:" in out.err and "plain text" in out.err and "ansible-vault encrypt" in out.err
    assert sorted(p.name for p in path.parent.iterdir()) == ["vllm_serve_api_key.yml"], "no temporary left"
    assert run_cli(["validate", str(inventory)], monkeypatch) == 0, capsys.readouterr().err

    # A second key is refused (exit 2), the first kept; --rotate replaces it.
    assert run_cli(["serve", "key", str(inventory)], monkeypatch) == 2
    assert "has an API key already; --rotate replaces it" in capsys.readouterr().err
    assert yaml.safe_load(path.read_text())["vllm_serve_api_key"] == key
    assert run_cli(["serve", "key", str(inventory), "--rotate"], monkeypatch) == 0
    assert yaml.safe_load(path.read_text())["vllm_serve_api_key"] != key
    assert (tmp_path / "group_vars" / "all.yml").read_text() == SERVED, "no other file touched"


def test_serve_key_encrypts_with_the_vault_password_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    inventory = write_tree(tmp_path, {"inventory.ini": INI, "group_vars/all.yml": SERVED})
    password = tmp_path / "vault-pass"
    password.write_text("correct horse\n")
    assert run_cli(["serve", "key", str(inventory), "--vault-password-file", str(password)], monkeypatch) == 0
    assert "encrypted with ansible-vault (vault id default)" in capsys.readouterr().out
    path = tmp_path / KEY_FILE
    body = path.read_bytes()
    assert body.startswith(b"$ANSIBLE_VAULT;1.1;AES256\n") and b"vllm_serve_api_key" not in body
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    plain = VaultLib([("default", VaultSecret(b"correct horse"))]).decrypt(body).decode()
    assert len(yaml.safe_load(plain)["vllm_serve_api_key"]) == 43
    assert run_cli(["validate", str(inventory), "--vault-password-file", str(password)], monkeypatch) == 0
    capsys.readouterr()
    assert run_cli(["validate", str(inventory)], monkeypatch) == 2, "no password: the key cannot be read"


def test_serve_key_refuses_a_folder_that_would_hide_the_groups_variables_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ansible reads group_vars/npu_nodes/ instead of group_vars/npu_nodes.yml once the folder exists."""
    inventory = write_tree(tmp_path, {"inventory.ini": INI, "group_vars/npu_nodes.yml": SERVED})
    assert run_cli(["serve", "key", str(inventory)], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "npu_nodes.yml: the variables of group npu_nodes are this one file" in err
    assert "mv" in err and "--group" in err
    assert not (tmp_path / "group_vars" / "npu_nodes").exists()
    assert run_cli(["serve", "key", str(inventory), "--group", "all"], monkeypatch) == 0
    assert run_cli(["validate", str(inventory)], monkeypatch) == 0, capsys.readouterr().err


def test_serve_key_refuses_a_bad_group_and_a_missing_inventory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = write_tree(tmp_path, {"inventory.ini": INI})
    assert run_cli(["serve", "key", str(inventory), "--group", "../etc"], monkeypatch) == 2
    assert "--group '../etc': not a group name" in capsys.readouterr().err
    assert run_cli(["serve", "key", str(inventory), "--group", "npu_nodes\n"], monkeypatch) == 2
    assert "--group 'npu_nodes\\n': not a group name" in capsys.readouterr().err
    assert not (tmp_path / "group_vars").exists()
    assert run_cli(["serve", "key", str(tmp_path / "nope.ini")], monkeypatch) == 2
    assert "nope.ini: no such inventory" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the rig and the summary


def test_sim_serve_writes_a_key_with_the_product_command(tmp_path: Path) -> None:
    from provision_sim.serving.setup import write_api_key

    inventory = write_tree(tmp_path, {"inventory.ini": INI, "group_vars/npu_nodes.yml": SERVED})
    said = write_api_key(inventory)
    path = tmp_path / "group_vars" / "all" / "vllm_serve_api_key.yml"
    assert said == f"API key: {path} (plain text, mode 0600: the rig has no vault password)"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    done = subprocess.run(
        [sys.executable, "-m", "provision", "validate", str(inventory)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    key = path.read_text()
    assert write_api_key(inventory) == f"API key: {path} (kept)" and path.read_text() == key


def test_the_endpoint_summary_says_how_to_send_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from provision.cli import _playbook
    from provision.cli.console import Console

    inventory = write_tree(tmp_path, {"inventory.ini": INI, "group_vars/all.yml": SERVED})
    assert run_cli(["serve", "key", str(inventory)], monkeypatch) == 0
    capsys.readouterr()
    result = RunResult("serve.yml", 0, "successful", tmp_path, 1.0, False)
    result.endpoints = [ServedEndpoint("node1", "chat", "http://192.0.2.11:8000", "m", "ready", True, True)]
    _playbook.endpoints(result, Console.for_stream(sys.stdout), inventory)
    out = capsys.readouterr().out
    assert "curl -s http://192.0.2.11:8000/v1/completions" in out
    assert '-H "Authorization: Bearer $VLLM_API_KEY"' in out
    pick = "sed -n 's/^vllm_serve_api_key: \"\\(.*\\)\"$/\\1/p'"
    line = f"  (export VLLM_API_KEY=$({pick} {tmp_path / KEY_FILE}))"
    assert line in out.splitlines(), out
    exported = subprocess.run(["sh", "-c", f"{pick} {tmp_path / KEY_FILE}"], capture_output=True, text=True)
    assert exported.stdout.strip() == yaml.safe_load((tmp_path / KEY_FILE).read_text())["vllm_serve_api_key"]


# ------------------------------------------------------------------------------ the role's safety net


def _check_play(tmp_path: Path, ansible_host: str, **role_vars: object) -> subprocess.CompletedProcess[str]:
    """The vllm_serve role's check tasks under plain ansible-playbook (no `provision validate` before it) on
    this machine, service mode from this interpreter's prefix, one served pool."""
    import os

    from provision.runner.run import ansible_env

    pools = [{"name": "smol", "devices": [0], "port": 8000, "profile": "p"}]
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "smol.env").write_text("NPU_POOL=smol\n")
    (tmp_path / "inventory.ini").write_text(
        f"[npu_nodes]\nnode1 ansible_host={ansible_host} ansible_connection=local "
        f"ansible_python_interpreter={sys.executable}\n"
    )
    variables = {
        "npu_pools_list": pools,
        "vllm_serve_profiles": {"p": {"model": "/models/smol"}},
        "vllm_serve_mode": "service",
        "vllm_serve_venv": str(Path(sys.executable).parent.parent),
        "vllm_serve_pools_dir": str(tmp_path / "pools"),
        "vllm_serve_check_model": False,
        "vllm_serve_state_dir": str(tmp_path),
        "vllm_serve_min_free_mb": 0,
        **role_vars,
    }
    play = [
        {
            "hosts": "npu_nodes",
            "gather_facts": False,
            "vars": variables,
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "provision.ascend.vllm_serve",
                        "tasks_from": "check.yml",
                    }
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(tmp_path / "inventory.ini"),
        str(tmp_path / "play.yml"),
    ]
    env = {**os.environ, **ansible_env()}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


TASK = "Refuse engines that listen beyond loopback without an API key"


def test_the_role_refuses_a_templated_bind_address_that_is_open_and_keyless(tmp_path: Path) -> None:
    """A bind address from a template: validate cannot judge it; the role does, once Ansible templated it."""
    done = _check_play(tmp_path, "192.0.2.11", vllm_serve_bind_host="{{ ansible_host }}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"TASK [provision.ascend.vllm_serve : {TASK}]" in done.stdout
    text = " ".join(done.stdout.split())
    assert "node1: the engines would listen on 192.0.2.11 without an API key" in text, done.stdout
    assert "vllm_serve_allow_unauthenticated: true" in text


@pytest.mark.parametrize(
    ("ansible_host", "role_vars"),
    [
        ("127.0.0.1", {}),  # the default bind: the management address, here loopback
        ("192.0.2.11", {"vllm_serve_api_key": "{{ 'templated-' ~ 'key' }}"}),
        ("192.0.2.11", {"vllm_serve_allow_unauthenticated": "true"}),
    ],
)
def test_the_role_lets_a_keyed_loopback_or_opted_out_engine_through(
    tmp_path: Path, ansible_host: str, role_vars: dict[str, object]
) -> None:
    done = _check_play(tmp_path, ansible_host, **role_vars)
    assert done.returncode == 0, done.stdout + done.stderr
    after = done.stdout.split(f"TASK [provision.ascend.vllm_serve : {TASK}]", 1)[1]
    assert after.split("\n", 2)[1] == "ok: [node1]", done.stdout  # the check ran and passed, not skipped
    assert "templated-key" not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("host_line", "bind"),
    [("node1 ansible_host=192.0.2.11", "192.0.2.11"), ("atlas-a01.lan", "0.0.0.0")],
)
def test_serve_explain_shows_the_bind_address_the_role_will_use(
    tmp_path: Path, host_line: str, bind: str
) -> None:
    import json

    from typer.testing import CliRunner

    from provision.cli.serve import register
    from tests.helpers import cli_app

    files = {
        "inventory.ini": f"[npu_nodes]\n{host_line}\n",
        "group_vars/npu_nodes.yml": SERVED + "vllm_serve_api_key: k\n",
    }
    inventory = write_tree(tmp_path, files)
    result = CliRunner().invoke(cli_app(register), ["serve", "explain", str(inventory), "--json"])
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.output)["instances"]
    assert record["argv"][record["argv"].index("--host") + 1] == bind

"""Vault everywhere: an inventory with a vault-encrypted group_vars file or inline ``!vault`` values reads,
validates and runs with ansible-playbook's vault options (and ``$ANSIBLE_VAULT_PASSWORD_FILE``); a missing
or wrong password is exit 2 naming the file; secrets given with ``-e`` or the vault never land in plain text
in the run directory (one real run, local connection, then every file of it searched).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.cli import _playbook
from provision.runner.run import RunResult
from tests import helpers

pytestmark = pytest.mark.unit

PASSWORD = "the-vault-password"
INVENTORY = "[npu_nodes]\nnode1 ansible_host=192.0.2.10\n"


def encrypted(text: str, password: str = PASSWORD) -> bytes:
    """``text`` as ``ansible-vault encrypt`` writes it."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(password.encode()))]).encrypt(text)


def inline(value: str, password: str = PASSWORD) -> str:
    """A ``!vault`` value as ``ansible-vault encrypt_string`` prints it (indented under its key)."""
    lines = encrypted(value, password).decode().splitlines()
    return "!vault |\n" + "".join(f"  {line}\n" for line in lines)


def password_file(folder: Path, password: str = PASSWORD) -> Path:
    path = folder / "vault-pass.txt"
    path.write_text(f"{password}\n")
    return path


@pytest.fixture
def vaulted_file(tmp_path: Path) -> Path:
    """An inventory whose group_vars/all.yml is vault-encrypted."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_bytes(
        encrypted("vllm_serve_api_key: from-the-vault\nascend_npu_count: 8\n")
    )
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(INVENTORY)
    return inventory


@pytest.fixture
def vaulted_inline(tmp_path: Path) -> Path:
    """An inventory with inline !vault values in group_vars/npu_nodes.yml: a string and an integer."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(
        f"vllm_serve_api_key: {inline('inline-key')}ascend_npu_count: {inline('4')}"
    )
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(INVENTORY)
    return inventory


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = helpers.run_cli(args, monkeypatch)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output
    return code, output


@pytest.fixture(autouse=True)
def no_vault_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ansible import constants as C

    monkeypatch.setattr(C, "DEFAULT_VAULT_PASSWORD_FILE", None)
    monkeypatch.setattr(C, "DEFAULT_VAULT_IDENTITY_LIST", [])
    monkeypatch.setattr(C, "DEFAULT_ASK_VAULT_PASS", False)
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))


# ------------------------------------------------------------------------------------------ validate


@pytest.mark.parametrize("how", ["--vault-password-file", "--vault-id"])
def test_a_vault_encrypted_group_vars_file_validates_with_its_password(
    how: str, vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = password_file(vaulted_file.parent)
    given = str(secret) if how == "--vault-password-file" else f"ops@{secret}"
    code, output = run_cli(["validate", str(vaulted_file), how, given], monkeypatch, capsys)
    assert code == 0, output
    assert f"{vaulted_file}: ok (1 host(s), 1 group(s)); no host was contacted" in output


def test_inline_vault_values_are_typed_decrypted(
    vaulted_inline: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from provision.inventory.validate import check
    from provision.inventory.vault import Vault

    secret = password_file(vaulted_inline.parent)
    code, output = run_cli(
        ["validate", str(vaulted_inline), "--vault-password-file", str(secret)], monkeypatch, capsys
    )
    assert code == 0, output  # not "must be a string": the decrypted text is what is checked
    assert "ok (1 host(s), 1 group(s))" in output
    loaded = check(vaulted_inline, Vault(password_files=(str(secret),)))
    assert loaded.hosts["node1"]["vllm_serve_api_key"] == "inline-key"


def test_an_inline_vault_value_that_decrypts_to_a_bad_value_is_refused_naming_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(f"ascend_npu_count: {inline('99')}")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(INVENTORY)
    secret = password_file(tmp_path)
    code, output = run_cli(
        ["validate", str(inventory), "--vault-password-file", str(secret)], monkeypatch, capsys
    )
    assert code == 2
    assert (
        "group_vars/npu_nodes.yml:1: group npu_nodes: ascend_npu_count = <from the vault, not shown>: "
        "must be less than or"
    ) in output
    assert "'99'" not in output, "a decrypted value is named, never printed"


def test_a_bad_value_of_a_vault_encrypted_file_is_refused_without_showing_it(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (vaulted_file.parent / "group_vars" / "all.yml").write_bytes(
        encrypted("vllm_serve_api_key: from-the-vault\nascend_npu_count: 99\n")
    )
    secret = password_file(vaulted_file.parent)
    code, output = run_cli(
        ["validate", str(vaulted_file), "--vault-password-file", str(secret)], monkeypatch, capsys
    )
    assert code == 2, output
    assert "group_vars/all.yml" in output and "ascend_npu_count = <from the vault, not shown>" in output
    # The folder pytest made (pytest-199/...) may carry the digits; the value must not appear elsewhere.
    assert "99" not in output.replace(str(vaulted_file.parent), "").replace("ascend_npu_count", "")


@pytest.mark.parametrize("password", [None, "not-the-password"])
def test_a_vault_file_without_its_password_exits_2_naming_the_file(
    password: str | None,
    vaulted_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["validate", str(vaulted_file)]
    if password:
        args += ["--vault-password-file", str(password_file(vaulted_file.parent, password))]
    code, output = run_cli(args, monkeypatch, capsys)
    assert code == 2
    reason = "Decryption failed" if password else "no vault secrets found"
    assert f"error: {vaulted_file}: variables of host node1 cannot be read: " in output
    assert f"{vaulted_file.parent / 'group_vars' / 'all.yml'}: " in output and reason in output
    assert "give the vault password with --vault-id, --vault-password-file, --ask-vault-pass" in output


@pytest.mark.parametrize("password", [None, "not-the-password"])
def test_an_inline_vault_value_without_its_password_exits_2_naming_file_line_and_variable(
    password: str | None,
    vaulted_inline: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["validate", str(vaulted_inline)]
    if password:
        args += ["--vault-password-file", str(password_file(vaulted_inline.parent, password))]
    code, output = run_cli(args, monkeypatch, capsys)
    assert code == 2
    where = vaulted_inline.parent / "group_vars" / "npu_nodes.yml"
    assert f"error: {where}:1: vllm_serve_api_key: an inline !vault value cannot be decrypted: " in output
    assert ("Decryption failed" if password else "no vault password was given") in output


def test_a_missing_password_file_exits_2_naming_it(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = vaulted_file.parent / "nope.txt"
    code, output = run_cli(
        ["validate", str(vaulted_file), "--vault-password-file", str(missing)], monkeypatch, capsys
    )
    assert code == 2
    assert f"error: --vault-password-file {missing}: no such file" in output


def test_ansible_vault_password_file_from_the_environment_is_used(
    vaulted_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    done = helpers.provision_cli("validate", str(vaulted_file), runs=tmp_path / "runs", timeout=120)
    assert done.returncode == 2 and "no vault secrets found" in done.stderr, done.stderr
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password_file(tmp_path)))
    done = helpers.provision_cli("validate", str(vaulted_file), runs=tmp_path / "runs", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ok (1 host(s), 1 group(s))" in done.stdout


def test_ask_vault_pass_asks_on_a_terminal(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[str] = []

    def getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return PASSWORD

    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, output = run_cli(["validate", str(vaulted_file), "--ask-vault-pass"], monkeypatch, capsys)
    assert code == 0, output
    assert asked == ["Vault password: "]  # ansible-playbook's prompt, asked once


def test_ansible_ask_vault_pass_setting_asks_as_the_option_does(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ansible import constants as C

    asked: list[str] = []

    def getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return PASSWORD

    monkeypatch.setattr(C, "DEFAULT_ASK_VAULT_PASS", True)  # what $ANSIBLE_ASK_VAULT_PASS=1 sets
    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, output = run_cli(["validate", str(vaulted_file)], monkeypatch, capsys)
    assert code == 0, output
    assert asked == ["Vault password: "]


@pytest.mark.parametrize("option", [["--ask-vault-pass"], ["--vault-id", "ops@prompt"]])
def test_a_vault_prompt_without_a_terminal_exits_2_saying_what_to_give(
    option: list[str],
    vaulted_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, output = run_cli(["validate", str(vaulted_file), *option], monkeypatch, capsys)
    assert code == 2
    assert "cannot ask for the vault password, stdin is not a terminal" in output
    assert "give --vault-password-file FILE" in output


# ------------------------------------------------------------------------------------------ to the run


def test_a_prompted_vault_password_reaches_the_run_through_a_file_removed_after_it(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ansible_runner

    seen: list[dict[str, Any]] = []

    def fake_run(**kwargs: Any) -> Any:
        args = kwargs["cmdline"].split()
        vault_file = Path(args[args.index("--vault-id") + 1].split("@", 1)[1])
        seen.append({**kwargs, "vault_file": vault_file, "content": vault_file.read_text()})
        return type("Runner", (), {"rc": 0, "status": "successful"})()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": PASSWORD)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, output = run_cli(
        ["plan", str(vaulted_file), "-p", "preflight", "--ask-vault-pass"], monkeypatch, capsys
    )
    assert code == 0, output
    [call] = seen
    assert call["content"] == PASSWORD
    assert not call["vault_file"].exists()
    assert not str(call["vault_file"]).startswith(call["private_data_dir"])
    assert call["suppress_env_files"] is True  # no env/ copies (env/passwords, env/cmdline)
    assert PASSWORD not in json.dumps({k: v for k, v in call.items() if k != "content"}, default=str)


def test_the_run_reads_the_inventories_it_was_given(
    vaulted_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[dict[str, Any]] = []

    def fake_run(playbook: str, inventory: list[Path], **kwargs: Any) -> RunResult:
        calls.append({"inventory": inventory, **kwargs})
        return RunResult(playbook, 0, "successful", vaulted_file.parent, 0, False)

    monkeypatch.setattr(_playbook, "run_playbook", fake_run)
    secret = password_file(vaulted_file.parent)
    more = vaulted_file.parent / "more.ini"
    more.write_text("[npu_nodes]\nnode2 ansible_host=192.0.2.11\n")
    code, output = run_cli(
        ["plan", "-i", str(vaulted_file), "-i", str(more), "--vault-id", f"ops@{secret}"], monkeypatch, capsys
    )
    assert code == 0, output
    [call] = calls
    assert call["inventory"] == [vaulted_file, more]
    assert call["options"].vault.ids == (f"ops@{secret}",)


# ------------------------------------------------------------------------------------------ dynamic


def test_an_executable_inventory_script_and_a_constructed_config_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "cmdb.py"
    listing = {
        "npu_nodes": {"hosts": ["node1", "node2"]},
        "_meta": {
            "hostvars": {"node1": {"ansible_host": "192.0.2.10"}, "node2": {"ansible_host": "192.0.2.11"}}
        },
    }
    script.write_text(f"#!{sys.executable}\nimport json\nprint(json.dumps({listing!r}))\n")
    script.chmod(0o755)
    constructed = tmp_path / "rack.yml"
    constructed.write_text(
        "plugin: ansible.builtin.constructed\nstrict: true\n"
        "groups:\n  rack_a: inventory_hostname == 'node1'\n"
    )
    code, output = run_cli(["validate", str(script), "-i", str(constructed)], monkeypatch, capsys)
    assert code == 0, output
    assert f"{script}, {constructed}: ok (2 host(s), 2 group(s)); no host was contacted" in output

    from provision.inventory.load import load_inventory

    loaded = load_inventory([script, constructed])
    assert loaded.group_hosts("rack_a") == ["node1"]
    assert loaded.hosts["node2"]["ansible_host"] == "192.0.2.11"


def test_an_inventory_script_that_fails_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "cmdb.sh"
    script.write_text("#!/bin/sh\necho 'cmdb is down' >&2\nexit 3\n")
    script.chmod(0o755)
    code, output = run_cli(["validate", str(script)], monkeypatch, capsys)
    assert code == 2
    assert (
        f"error: {script}: not a valid Ansible inventory: Inventory script returned non-zero exit code 3"
        in output
    )


# ------------------------------------------------------------------------------------------ a real run


def test_secrets_given_with_e_or_the_vault_are_nowhere_in_the_run_directory(tmp_path: Path) -> None:
    """A real run (preflight, local connection): the key=value -e and the vault file reach the play (this
    machine passes the OS and NPU checks only with them), and no file of the run directory holds a secret."""
    inventory = helpers.localhost_inventory(tmp_path, {})
    (tmp_path / "group_vars" / "all.yml").write_bytes(
        encrypted("preflight_require_npus: false\nmy_db_password: vaulted-PLANTED-1\n")
    )
    secret = password_file(tmp_path)
    runs = tmp_path / "runs"
    done = helpers.provision_cli(
        "apply", str(inventory), "-p", "preflight", "--json", "--vault-password-file", str(secret),
        "-e", "preflight_allow_unsupported_os=true vllm_serve_api_key=cli-PLANTED-2",
        "-e", '{"other_token": "json-PLANTED-3"}',
        runs=runs, timeout=300,
    )  # fmt: skip
    summary = helpers.json_summary(done, "apply -p preflight")
    assert summary["hosts"]["localhost"]["failed"] == 0
    run_dir = Path(summary["run_dir"])
    files = [path for path in run_dir.rglob("*") if path.is_file()]
    assert any(path.name == "command" for path in files) and any("job_events" in str(p) for p in files)
    planted = ("vaulted-PLANTED-1", "cli-PLANTED-2", "json-PLANTED-3", PASSWORD)
    leaks = [
        f"{path}: {word}" for path in files for word in planted if word in path.read_text(errors="replace")
    ]
    assert leaks == []
    assert not any(word in done.stdout + done.stderr for word in planted)
    [command] = [json.loads(p.read_text()) for p in files if p.name == "command"]
    passed = [arg.removeprefix("@") for arg in command["command"] if arg.startswith("@")]
    assert len(passed) == 2 and not any(Path(path).exists() for path in passed)  # removed after the run

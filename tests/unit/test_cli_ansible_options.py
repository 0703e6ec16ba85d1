"""ansible-playbook's connection and become options on the verbs that run Ansible: they reach the run with
ansible-playbook's meanings; ``-k``/``-K`` ask on a terminal (ansible-playbook's prompts) and their
passwords reach the run through files outside the run directory, removed after it; without a terminal they
are exit 2 saying what to give instead. ansible-runner is replaced by a recording fake."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import helpers

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    folder = tmp_path / "inventory"
    shutil.copytree(EXAMPLES, folder)
    return folder / "inventory.ini"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """Every ansible_runner.run call: its arguments, its command line split, and the content of each file
    a password option names (read while the run lasts)."""
    import ansible_runner

    calls: list[dict[str, Any]] = []

    def fake_run(**kwargs: Any) -> Any:
        args = shlex.split(kwargs.get("cmdline") or "")
        files = {}
        for option in ("--connection-password-file", "--become-password-file"):
            if option in args:
                path = Path(args[args.index(option) + 1])
                files[option] = (path, path.read_text())
        calls.append({**kwargs, "args": args, "files": files})
        return type("Runner", (), {"rc": 0, "status": "successful"})()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("PROVISION_QUIET", "1")
    return calls


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = helpers.run_cli(args, monkeypatch)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output
    return code, output


def test_connection_and_become_options_reach_the_run(
    inventory: Path,
    tmp_path: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("not really a key\n")
    code, output = run_cli(
        ["plan", "-i", str(inventory), "-p", "preflight", "-u", "deployer", "--private-key", str(key), "-b",
         "--ssh-common-args", "-o ProxyJump=bastion"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0, output
    [call] = runner
    args = call["args"]
    assert args[args.index("--user") + 1] == "deployer"
    assert args[args.index("--private-key") + 1] == str(key)
    assert args[args.index("--ssh-common-args") + 1] == "-o ProxyJump=bastion"
    assert "--become" in args
    assert call["inventory"] == [str(inventory.resolve())]


def test_ask_pass_and_ask_become_pass_ask_once_and_the_run_reads_files_removed_after_it(
    inventory: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asked: list[str] = []
    answers = {"SSH password: ": "ssh-secret", "BECOME password[defaults to SSH password]: ": ""}

    def getpass(prompt: str = "") -> str:
        asked.append(prompt)
        return answers[prompt]

    monkeypatch.setattr("getpass.getpass", getpass)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, output = run_cli(["plan", str(inventory), "-p", "preflight", "-k", "-K"], monkeypatch, capsys)
    assert code == 0, output
    assert asked == list(answers)  # ansible-playbook's prompts, each once
    [call] = runner
    ssh_path, ssh = call["files"]["--connection-password-file"]
    become_path, become = call["files"]["--become-password-file"]
    assert ssh == "ssh-secret" and become == "ssh-secret"  # an empty become password is the SSH one
    run_dir = call["private_data_dir"]
    for path in (ssh_path, become_path):
        assert not path.exists() and not str(path).startswith(run_dir)
    assert "ssh-secret" not in repr({k: v for k, v in call.items() if k != "files"})
    assert call["suppress_env_files"] is True


@pytest.mark.parametrize(
    ("option", "instead"),
    [("-k", "--connection-password-file FILE"), ("-K", "--become-password-file FILE")],
)
def test_a_password_prompt_without_a_terminal_exits_2_saying_what_to_give(
    option: str,
    instead: str,
    inventory: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, output = run_cli(["apply", str(inventory), "-p", "preflight", option], monkeypatch, capsys)
    assert code == 2
    assert f"cannot ask for the password, stdin is not a terminal; give {instead}" in output
    assert runner == []


def test_password_files_are_handed_on_as_given(
    inventory: Path,
    tmp_path: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = tmp_path / "become.txt"
    secret.write_text("b3come\n")
    code, output = run_cli(
        ["apply", str(inventory), "-p", "preflight", "--become-password-file", str(secret)],
        monkeypatch,
        capsys,
    )
    assert code == 0, output
    [call] = runner
    assert call["files"]["--become-password-file"] == (secret, "b3come\n")


@pytest.mark.parametrize("option", ["--private-key", "--vault-password-file", "--connection-password-file"])
def test_a_file_option_naming_no_file_exits_2(
    option: str,
    inventory: Path,
    tmp_path: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "missing"
    code, output = run_cli(["apply", str(inventory), option, str(missing)], monkeypatch, capsys)
    assert code == 2
    assert f"error: {option} {missing}: no such file" in output
    assert runner == []


@pytest.mark.parametrize("verb", [["validate"], ["plan"], ["apply"], ["serve", "status"]])
def test_no_inventory_at_all_exits_2(
    verb: list[str],
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(verb, monkeypatch, capsys)
    assert code == 2
    assert "-i INVENTORY" in output
    assert runner == []


def test_serve_status_of_an_inventory_given_with_i_hands_the_options_on(
    inventory: Path,
    runner: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(
        ["serve", "status", "-i", str(inventory), "-u", "deployer", "-b"], monkeypatch, capsys
    )
    assert code == 1, output  # no instance answered (the fake runs nothing): not ready
    [call] = runner
    assert call["module"] == "provision.ascend.vllm_health"
    assert call["args"] == ["--user", "deployer", "--become"]
    assert call["inventory"] == [str(inventory.resolve())]

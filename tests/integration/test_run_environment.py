"""What a real run keeps of the controller's environment: an `apply` through ansible-runner against this
machine (local connection, the preflight playbook) with secrets exported around it.

ansible-runner writes the environment it starts ansible-playbook with into the run directory
(``artifacts/<ident>/command``); only the allow-list of ``provision.runner.environment`` may be there, and
only it may reach the processes of the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.runner.run import Event, run_module
from tests.helpers import localhost_inventory, provision_cli

pytestmark = pytest.mark.slow
TIMEOUT_S = 300

# Each kind of secret a shell may hold: an unrelated one, provision's own (read by provision, never by
# Ansible), a made-up Ansible-looking one, a hub token, a proxy with its password.
PLANTED = {
    "MY_DB_PASSWORD": "planted-db-5a1e07c2",
    "PROVISION_API_KEY": "planted-api-key-99e1",
    "PROVISION_REGISTRY_PASSWORD": "planted-registry-pw-3b7d",
    "ANSIBLE_VAULT_PASSWORD": "planted-vault-pw-c0ffee",
    "HF_TOKEN": "hf_plantedPlantedPlantedPlanted1234",
    "https_proxy": "http://ops:planted-proxy-pw-7777@127.0.0.1:3128",
}


def local_inventory(tmp_path: Path) -> Path:
    settings = {"preflight_require_npus": False, "preflight_allow_unsupported_os": True}
    return localhost_inventory(tmp_path, settings)


def plant(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:3128")  # no credentials: passed on


def test_an_apply_run_directory_holds_no_trace_of_an_exported_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch)
    inventory = local_inventory(tmp_path)
    done = provision_cli(
        "apply", str(inventory), "-p", "preflight", "--json", runs=tmp_path / "runs", timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    files = [path for path in run_dir.rglob("*") if path.is_file()]
    assert len(files) > 10, "the run directory keeps its events"
    for path in files:
        data = path.read_bytes()
        for name, value in PLANTED.items():
            assert value.encode() not in data, f"{name}'s value is in {path.relative_to(run_dir)}"
    (command,) = run_dir.glob("artifacts/*/command")
    env = json.loads(command.read_text())["env"]
    assert not set(PLANTED) & set(env)
    # the allow-list itself reached the run: what Ansible needs, provision's settings, a clean proxy
    assert env["PATH"] and env["HOME"] and env["PROVISION_RUNS_DIR"] == str(tmp_path / "runs")
    assert env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "awx_display"  # ansible-runner's own settings stay


def test_the_processes_of_a_run_see_only_the_allow_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(monkeypatch)
    monkeypatch.setenv("LC_TIME", "C.UTF-8")
    outputs: list[str] = []

    def seen(event: Event) -> None:
        res = (event.get("event_data") or {}).get("res") or {}
        if event.get("event") == "runner_on_ok" and "stdout" in res:
            outputs.append(str(res["stdout"]))

    run = run_module(
        "ansible.builtin.command", local_inventory(tmp_path), host_pattern="all", module_args="env",
        observer=seen,
    )  # fmt: skip
    assert run.rc == 0, run.stdout
    (printed,) = outputs
    names = {line.split("=", 1)[0] for line in printed.splitlines() if "=" in line}
    assert {"PATH", "HOME", "LC_TIME", "http_proxy"} <= names
    for name, value in PLANTED.items():
        assert value not in printed, f"{name} reached the module's process"


def test_a_secret_ansible_reads_from_the_environment_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_BECOME_PASS", "planted-become-pw-4242")
    inventory = local_inventory(tmp_path)
    runs = tmp_path / "runs"
    done = provision_cli("apply", str(inventory), "-p", "preflight", runs=runs, timeout=TIMEOUT_S)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ANSIBLE_BECOME_PASS set in the environment" in done.stderr
    assert "give -K (--ask-become-pass) or --become-password-file FILE instead" in done.stderr
    assert "Traceback" not in done.stderr
    assert not runs.exists() or not any(runs.iterdir()), "no run was started"

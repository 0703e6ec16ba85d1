"""The ``systemd_unit`` action: a start resets the unit's start limit first; a failure carries its journal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase

from tests.helpers import load_module

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
UNIT = load_module("provision_action_systemd_unit", ROOT / "plugins/action/systemd_unit.py")
SHOW = "ActiveState=failed\nSubState=failed\nMainPID=0\nNRestarts=0\nResult=start-limit-hit\n"
SEE = 'See "systemctl status docker.service" and "journalctl -xeu docker.service" for details.'
JOURNAL = "Starting docker...\n\x1b[0;1;31mdockerd: failed to start daemon: ip_forward\x1b[0m\nFailed.\n"


class Node:
    """What the action sends to the node, and what the module run returns."""

    def __init__(self, module_result: dict[str, Any]) -> None:
        self.module_result = module_result
        self.commands: list[str] = []
        self.modules: list[tuple[str, dict[str, Any]]] = []

    def command(self, command: str, sudoable: bool = True) -> dict[str, Any]:
        self.commands.append(command)
        if command.startswith("systemctl show"):
            return {"rc": 0, "stdout": SHOW}
        if "journalctl" in command:
            return {"rc": 0, "stdout": JOURNAL}
        return {"rc": 0, "stdout": ""}

    def module(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> dict[str, Any]:
        self.modules.append((module_name, dict(module_args)))
        return dict(self.module_result)


def run(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], node: Node, check: bool = False) -> Any:
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action = UNIT.ActionModule.__new__(UNIT.ActionModule)
    action._task = SimpleNamespace(args=args, check_mode=check)
    action._low_level_execute_command = node.command
    action._execute_module = node.module
    return action.run(task_vars={})


def test_a_start_resets_the_failed_state_first(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"changed": True, "name": "docker", "state": "started"})
    result = run(monkeypatch, {"name": "docker", "state": "started", "enabled": True, "log_lines": 5}, node)
    assert node.commands == ["systemctl reset-failed docker"]
    assert node.modules == [
        ("ansible.builtin.systemd_service", {"name": "docker", "state": "started", "enabled": True})
    ]
    assert result["changed"] is True and "journal" not in result


@pytest.mark.parametrize(
    ("args", "check"),
    [
        ({"name": "docker", "state": "stopped"}, False),
        ({"name": "docker", "enabled": True}, False),
        ({"name": "docker", "state": "restarted"}, True),
        ({"daemon_reload": True}, False),
    ],
)
def test_no_reset_unless_a_real_start(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], check: bool
) -> None:
    node = Node({"changed": False})
    run(monkeypatch, args, node, check=check)
    assert node.commands == []
    assert node.modules[0][1] == args


def test_a_failure_names_the_units_state_and_its_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = {
        "failed": True,
        "msg": f"Unable to start service docker: Job for docker.service failed.\n{SEE}\n",
    }
    node = Node(failed)
    result = run(monkeypatch, {"name": "docker", "state": "started", "log_lines": 3}, node)
    assert result["failed"] is True
    assert result["journal"] == [
        "Starting docker...",
        "dockerd: failed to start daemon: ip_forward",
        "Failed.",
    ]
    assert result["msg"] == (
        f"Unable to start service docker: Job for docker.service failed.\n{SEE}\n"
        "docker: failed/failed, result start-limit-hit\n"
        "last 3 lines of its journal:\n"
        "  | Starting docker...\n  | dockerd: failed to start daemon: ip_forward\n  | Failed."
    )
    assert node.commands[0] == "systemctl reset-failed docker"
    assert "journalctl -u docker -n 3" in node.commands[-1]


def test_log_lines_must_be_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.errors import AnsibleActionFail

    with pytest.raises(AnsibleActionFail, match="log_lines must be a whole number"):
        run(monkeypatch, {"name": "docker", "state": "started", "log_lines": "many"}, Node({}))

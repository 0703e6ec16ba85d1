"""Action plugin ``systemd_unit``: ``ansible.builtin.systemd_service`` for the units the roles start, with a
reset start limit before each start and the unit's own story in every failure. Documentation:
``plugins/modules/systemd_unit.py``.

Why not the module alone: systemd refuses a start once a unit failed too often in a short time
(``StartLimitBurst``, docker.service: 3 in 60 s) and keeps refusing after the cause is fixed, so a rerun would
fail where a person would type ``systemctl reset-failed``; and the module's failure says only ``See "systemctl
status ..."``, on a node the user may not even have a shell on.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.systemd import UnitWatch, describe_unit

STARTS = frozenset(("started", "restarted", "reloaded"))


def failure_message(message: str, unit: str, state: Mapping[str, str], tail: list[str]) -> str:
    """The module's message, then the unit's state and the last lines of its journal."""
    text = f"{message.rstrip()}\n{unit}: {describe_unit(state)}" if state else message.rstrip()
    if tail:
        text += f"\nlast {len(tail)} lines of its journal:\n" + "\n".join(f"  | {line}" for line in tail)
    return text


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            lines = int(args.pop("log_lines", 20))
        except (TypeError, ValueError):
            raise AnsibleActionFail("systemd_unit: log_lines must be a whole number") from None
        unit = str(args.get("name") or args.get("unit") or "")
        if unit and args.get("state") in STARTS and not self._task.check_mode:
            # A no-op on a unit that has not failed; failing here (no such unit yet) is the module's to say.
            self._run(f"systemctl reset-failed {shlex.quote(unit)}")
        done: dict[str, Any] = self._execute_module(
            module_name="ansible.builtin.systemd_service", module_args=args, task_vars=task_vars
        )
        if done.get("failed") and unit:
            watch = UnitWatch(self._run, unit, every_s=0, track_pid=False)
            try:
                state = watch.refresh()
            except AnsibleActionFail:
                state = {}
            tail = watch.journal(lines) if lines > 0 else []
            done["msg"] = failure_message(str(done.get("msg", "")), unit, state, tail)
            done["journal"] = tail
        result.update(done)
        return result

    def _run(self, command: str) -> dict[str, Any]:
        done: dict[str, Any] = self._low_level_execute_command(command, sudoable=True)
        return done

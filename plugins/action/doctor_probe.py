"""Action plugin ``doctor_probe``: everything ``provision doctor`` reads of a node, in ONE read-only command.

It runs :func:`provision.doctor.probe.probe_command` on the node (the facts probe, the HCCN probe, the
doctor's own sections) and, only when ``npu-smi`` lists processes, a second small command for their
cgroups. The raw text comes back unparsed: the controller parses it with provision's parsers and keeps it
for the support bundle. Documentation: ``plugins/modules/doctor_probe.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.doctor.probe import JOURNAL_LINES, holders_command, npu_pids, probe_command


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"devices", "journal_lines", "since_s"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        try:
            devices = args.get("devices")
            if devices is None:
                count = self._templar.template((task_vars or {}).get("ascend_npu_count", 8))
                devices = list(range(int(count)))
            devices = [int(d) for d in devices]
            lines = int(args.get("journal_lines", JOURNAL_LINES))
            since = int(args["since_s"]) if args.get("since_s") not in (None, "") else None
            if since is not None and since <= 0:
                raise ValueError(f"since_s must be above 0, not {since}")
        except (TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"doctor_probe: bad arguments: {exc}") from exc
        probe = self._run(probe_command(devices, journal_lines=lines, since_s=since))
        try:
            pids = npu_pids(probe)
        except ValueError as exc:
            raise AnsibleActionFail(f"cannot read the node's probe: {exc}") from exc
        holders = self._run(holders_command(pids)) if pids else ""
        result.update(changed=False, probe=probe, holders=holders)
        return result

    def _run(self, command: str) -> str:
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"doctor probe failed (rc={done.get('rc')}): {done.get('stderr') or done.get('stdout')}"
            )
        return str(done.get("stdout", ""))

"""Action plugin ``ascend_facts``: probe a node's NPUs, driver/firmware and free disk in ONE round trip.

It runs a read-only shell probe on the node (PCI view, ``npu-smi info``, ``version.info`` files, ``df``)
and parses the output HERE, on the controller, with :mod:`provision.ascend` — the one copy of each parser
(see DESIGN.md). Documentation: ``plugins/modules/ascend_facts.py``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"disk_paths"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        paths = self._task.args.get("disk_paths") or ["/"]
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise AnsibleActionFail("disk_paths must be a list of paths")
        command = shlex.join(["sh", "-c", PROBE_SCRIPT, "ascend-probe", *paths])
        probe = self._low_level_execute_command(command, sudoable=True)
        if probe.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"NPU probe failed (rc={probe.get('rc')}): {probe.get('stderr') or probe.get('stdout')}"
            )
        try:
            facts = facts_from_probe(str(probe.get("stdout", "")))
        except ValueError as exc:
            raise AnsibleActionFail(f"cannot read the node's NPU probe: {exc}") from exc
        result.update(changed=False, ansible_facts=facts)
        return result

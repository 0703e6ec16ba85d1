"""Action plugin ``converged_state``: is this node still as the last converged apply left it? (or record it)

One read-only command over the existing connection (no module upload): the ``ascend_facts`` probe (PCI
view, ``npu-smi info``, driver/firmware ``version.info``) followed by provision's record observer
(:data:`provision.converge.record.OBSERVE_SCRIPT`), which reads ``/var/lib/provision/converged.json`` and
observes every resource it watches. Everything is compared on the controller
(:func:`provision.converge.record.drift`). With ``write``, the observation (of the record's keys plus the
given ones) becomes the node's new record, written by a second command. Documentation:
``plugins/modules/converged_state.py``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe
from provision.ascend.lock import stack_report
from provision.converge.record import (
    Keys,
    drift,
    new_record,
    npu_summary,
    observe_command,
    parse_observation,
    probe_output,
    write_command,
)
from provision.paths import RECORD_PATH


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"fingerprint", "write", "keys", "path", "stack"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        fp = args.get("fingerprint")
        if not isinstance(fp, str) or not fp:
            raise AnsibleActionFail("fingerprint is required (provision apply passes it)")
        write = args.get("write", False)
        write = write.lower() in ("1", "true", "yes") if isinstance(write, str) else bool(write)
        path = str(args.get("path") or RECORD_PATH)
        given = args.get("keys")
        if given is not None and not isinstance(given, Mapping):
            raise AnsibleActionFail("keys must be a dict of lists (paths, units, packages, users, groups)")
        python = self._python(task_vars)
        keys = Keys.from_json(given) if write else None
        probe = shlex.join(["sh", "-c", PROBE_SCRIPT, "ascend-probe", "/"])
        text = self._run(f"{probe}; {observe_command(python, keys=keys, union=True, record=path)}")
        try:
            observation = parse_observation(text)
            npus = npu_summary(facts_from_probe(probe_output(text))["ascend_npus"])
        except ValueError as exc:
            tail = text.strip()[-300:] or "(nothing)"
            raise AnsibleActionFail(
                f"cannot read the node's record observation: {exc}; it printed: {tail}"
            ) from exc
        previous = observation.record
        watched = {kind: len(values) for kind, values in observation.keys.to_json().items()}
        if write:
            if self._task.check_mode:
                result.update(changed=True, msg=f"would record {len(observation.keys)} resources in {path}")
                return result
            written_at = datetime.now(UTC).isoformat(timespec="seconds")
            content = new_record(fp, observation, npus, written_at)
            self._run(write_command(python, content, record=path))
            result.update(
                changed=previous is None or previous.get("observed") != content["observed"],
                watched=watched,
                written_at=written_at,
                msg=f"recorded {len(observation.keys)} resources in {path}",
            )
            return result
        reasons = drift(previous, observation.observed, npus, fp)
        if not reasons:
            # The stack report a converged node gets (report.yml's), from the local facts just read: the
            # records path runs this one task per node.
            try:
                report = stack_report(observation.local, args.get("stack") or None)
            except ValueError as exc:  # a stack the lock lacks (validate refuses it before any run)
                raise AnsibleActionFail(str(exc)) from exc
            result.update(stack=report, provision_info=report["line"])
        result.update(
            changed=False,
            converged=not reasons,
            drift=reasons,
            written_at=(previous or {}).get("written_at"),
            watched=watched,
            msg=(
                f"as recorded at {previous and previous.get('written_at')}: {len(observation.keys)} resources"
                if not reasons
                else "; ".join(reasons[:5]) + (f"; and {len(reasons) - 5} more" if len(reasons) > 5 else "")
            ),
        )
        return result

    @staticmethod
    def _python(task_vars: Mapping[str, Any]) -> str:
        value = task_vars.get("ansible_python_interpreter")
        if isinstance(value, str) and value and "{{" not in value and not value.startswith("auto"):
            return value
        facts = task_vars.get("ansible_facts") or {}
        found = facts.get("discovered_interpreter_python") if isinstance(facts, Mapping) else None
        return str(found) if found else "/usr/bin/python3"

    def _run(self, command: str) -> str:
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"record command failed (rc={done.get('rc')}): {done.get('stderr') or done.get('stdout')}"
            )
        # A command run with a terminal (become, or ssh -tt) ends its lines with CR LF.
        return str(done.get("stdout", "")).replace("\r\n", "\n")

"""Action plugin ``vllm_serve_preserve``: the pre-serve checks of a node's instances, before any unit starts.

It runs ONE read-only command on the node (the facts probe's ``npu-smi info``, then
:data:`provision.serving.preserve.PROBE_SCRIPT`: device nodes, the units' invocation ids, the running
containers, the weights' size and description files) and, only when npu-smi lists processes, the doctor's
small cgroup command (which unit holds each NPU). :func:`provision.serving.preserve.problems` decides, here
on the controller. Documentation: ``plugins/modules/vllm_serve_preserve.py``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from provision.ascend.facts import PROBE_SCRIPT as FACTS_SCRIPT
from provision.ascend.facts import sections
from provision.ascend.npu_smi import NpuSmiInfo, ParseError, dcmi_error_code, parse_npu_smi_info
from provision.doctor.probe import holders_command
from provision.errors import InputError
from provision.serving import preserve


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"instances", "profiles", "force"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        instances = args.get("instances") or []
        profiles = args.get("profiles") or {}
        if not isinstance(instances, list) or not all(isinstance(i, Mapping) for i in instances):
            raise AnsibleActionFail("instances must be the list of vllm_serve_instances")
        if not isinstance(profiles, Mapping):
            raise AnsibleActionFail("profiles must be a mapping (vllm_serve_profiles)")
        force = boolean(args.get("force", False), strict=True)
        host = str(task_vars.get("inventory_hostname") or "this node")

        models = sorted({str(i.get("model")) for i in instances if str(i.get("model") or "").startswith("/")})
        command = "; ".join(
            [
                shlex.join(["sh", "-c", FACTS_SCRIPT, "ascend-probe"]),
                shlex.join(["sh", "-c", preserve.PROBE_SCRIPT, "preserve-probe", *models]),
            ]
        )
        text = self._run(command)
        info, error = _npu_smi(text)
        probe = preserve.parse_probe(text, info, error)
        pids = sorted({p.pid for p in info.processes}) if info else []
        unit_of = preserve.holders(sections(self._run(holders_command(pids)))) if pids else {}
        try:
            found, notes = preserve.problems(instances, profiles, probe, unit_of)
        except (InputError, KeyError, ValueError) as exc:
            raise AnsibleActionFail(f"cannot check the node's instances: {exc}") from exc

        lines = [problem.line(host) for problem in found]
        result.update(
            changed=False,
            problems=[problem.as_dict() for problem in found],
            notes=notes,
            invocations=dict(probe.invocations),
        )
        if notes:
            result["warnings"] = [f"{host}: {note}" for note in notes]
        if not found:
            result["msg"] = f"{host}: every served pool may start ({len(instances)} checked)"
        elif force:
            result["warnings"] = [*result.get("warnings", []), *lines]
            result["msg"] = (
                f"{host}: {len(found)} pre-serve problem(s), started anyway (vllm_serve_preserve_force)"
            )
        else:
            result["failed"] = True
            result["msg"] = (
                f"Refused before start on {host} ({len(found)} problem(s); nothing was started or changed):\n"
                + "\n".join(lines)
                + "\nvllm_serve_preserve_force: true starts the instances anyway."
            )
        return result

    def _run(self, command: str) -> str:
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"pre-serve probe failed (rc={done.get('rc')}): {done.get('stderr') or done.get('stdout')}"
            )
        return str(done.get("stdout", ""))


def _npu_smi(text: str) -> tuple[NpuSmiInfo | None, str | None]:
    """The facts probe's ``npu-smi info``, or why there is none (no tool, DCMI failure, unreadable)."""
    found = sections(text)
    body = next((b for label, b in found if label.startswith("npu-smi ")), None)
    if body is None:
        return None, "npu-smi not found"
    rc = dict(found).get("npu-smi-rc", "1").strip()
    if rc != "0" or dcmi_error_code(body) is not None:
        last = body.strip().splitlines()[-1] if body.strip() else f"exit code {rc}"
        return None, f"npu-smi info failed: {last}"
    try:
        return parse_npu_smi_info(body), None
    except ParseError as exc:
        return None, f"unreadable npu-smi output: {exc}"

"""Action plugin ``vllm_serve_smoke``: the post-start smoke of an instance, inside it, before its health gate.

Once the unit of an instance (re)started in this run, it asks INSIDE the instance (container mode: ``docker
exec`` in the pool's container, in the image's Ascend environment) what the NPU runtime sees,
:data:`provision.serving.smoke.DEVICE_COUNT` (``python -c 'import torch, torch_npu; print(
torch.npu.device_count())'``), and requires the pool's NPU count; and it reads the engine's log of this start
(the unit's journal since its main process started) until vLLM says the Ascend platform plugin is active
(FACTS.md §1). The decision is :mod:`provision.serving.smoke`'s. An instance that is not running any more is
left to the health gate, which says why and rolls a changed one back; a failure here fails the gate the
same way. Documentation:
``plugins/modules/vllm_serve_smoke.py``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.serving import smoke
from provision.systemd import UnitWatch

_POLL_S = 2.0


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"unit", "container", "devices", "mode", "engine", "before", "timeout_s"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        try:
            unit = str(args["unit"])
            devices = int(args["devices"])
            mode = str(args.get("mode", "container"))
            container = str(args.get("container") or "")
            engine = str(args.get("engine") or "docker")
            before = str(args.get("before") or "")
            timeout_s = float(args.get("timeout_s", smoke.DEFAULT_TIMEOUT_S))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"vllm_serve_smoke: bad arguments: {exc}") from exc
        result["changed"] = False
        if self._task.check_mode:
            result.update(skipped=True, msg=f"{unit}: check mode, nothing started to smoke-test")
            return result
        if mode != "container":
            result["msg"] = smoke.SERVICE_MODE_NOTE
            result["warnings"] = [f"{unit}: {smoke.SERVICE_MODE_NOTE}"]
            return result

        deadline = time.monotonic() + timeout_s
        count: int | None = None
        seen = ""
        # Liveness as the health gate reads it (provision.systemd): an instance that stopped, waits to
        # restart (a container that cannot start loops there, and `docker exec` would only ever say "No such
        # container") or restarted while the smoke waited is the gate's to explain: it reads the journal
        # and rolls a changed instance back.
        watch = UnitWatch(
            lambda command: self._low_level_execute_command(command, sudoable=True),
            unit,
            every_s=0.0,
            track_pid=True,
            extra=smoke.UNIT_EXTRA,
        )
        while True:
            state = watch.refresh()
            if before and state.get("InvocationID", "") == before:
                result["msg"] = f"{unit}: not (re)started in this run, smoke-tested when it was"
                return result
            gone = watch.gone()
            if gone:
                result["msg"] = f"{gone}: its health gate says why"
                return result
            if count is None:
                rc, out, err = self._run(shlex.join([engine, "exec", container, *smoke.exec_argv()]))
                verdict = smoke.read_count(rc, out, err, devices, container)
                if verdict.failed:
                    raise AnsibleActionFail(verdict.message)
                count = verdict.count
                seen = verdict.message
            if count is not None:
                journal = self._run(smoke.journal_command(unit, state.get("ExecMainStartTimestamp", "")))[1]
                plugin = smoke.read_plugin(journal)
                seen = plugin.line
                if plugin.ok:
                    result.update(
                        device_count=count,
                        plugin_line=plugin.line,
                        msg=f"{unit}: the NPU runtime in {container} sees {count} NPU(s) as the pool has; "
                        f"engine log: {plugin.line}",
                    )
                    return result
            if time.monotonic() >= deadline:
                raise AnsibleActionFail(smoke.timeout_message(unit, container, count, timeout_s, seen))
            time.sleep(_POLL_S)

    def _run(self, command: str) -> tuple[int, str, str]:
        done = self._low_level_execute_command(command, sudoable=True)
        return int(done.get("rc", 1)), str(done.get("stdout", "")), str(done.get("stderr", ""))

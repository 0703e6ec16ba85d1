"""Action plugin ``vllm_head_listen``: wait until a multi-node head listens on its data-parallel RPC port, or
its engine exits first. Documentation: ``plugins/modules/vllm_head_listen.py``.

Run in the head's context. The port is tried from the controller (as the health gate reaches the API port);
the unit's state is read over the connection (``systemctl show``) at most every ``alive_every_s``. A head
whose new configuration is broken (a bad argument) exits within seconds and never opens the port: the
workers must not wait ``timeout_s`` for it, and the head's health gate then says why (and rolls back).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.systemd import UnitWatch, describe_unit


def listening(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a TCP connect to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(
        (
            "unit",
            "host",
            "port",
            "timeout_s",
            "poll_s",
            "alive_every_s",
            "log_lines",
            "fail_when_not_listening",
        )
    )

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        try:
            unit = str(args["unit"])
            host = str(args["host"])
            port = int(args["port"])
            timeout_s = float(args.get("timeout_s", 600))
            poll_s = float(args.get("poll_s", 0.2))
            every_s = float(args.get("alive_every_s", 1.0))
            lines = int(args.get("log_lines", 20))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"vllm_head_listen: unit, host and port are required ({exc})") from None
        fail = str(args.get("fail_when_not_listening", True)).lower() in ("1", "true", "yes", "on")
        if self._task.check_mode:
            result.update(changed=False, listening=None, msg="check mode: not waited")
            return result

        started = time.monotonic()
        watch = UnitWatch(self._run, unit, every_s=every_s, track_pid=False)
        while True:
            if listening(host, port):
                result.update(
                    changed=False,
                    listening=True,
                    seconds=round(time.monotonic() - started, 3),
                    msg=f"{unit} listens on {host}:{port}",
                )
                return result
            if not watch.alive():
                why = f"its engine exited before it opened the port ({unit}: {describe_unit(watch.state)})"
                break
            if time.monotonic() - started >= timeout_s:
                why = f"it did not open it within {timeout_s:g} s ({unit}: {describe_unit(watch.state)})"
                break
            time.sleep(poll_s)
        tail = watch.journal(lines) if lines > 0 else []
        message = f"{host}:{port} (the head's data-parallel RPC port): {why}"
        if tail:
            message += f"\nlast {len(tail)} lines of the head's log:\n" + "\n".join(f"  | {t}" for t in tail)
        result.update(
            changed=False, listening=False, seconds=round(time.monotonic() - started, 3), msg=message
        )
        if fail:
            result["failed"] = True
        return result

    def _run(self, command: str) -> dict[str, Any]:
        done: dict[str, Any] = self._low_level_execute_command(command, sudoable=True)
        return done

"""systemd units as provision reads them: the one parser of ``systemctl show`` output, and a unit watched
over an Ansible connection.

The actions ``vllm_health`` (liveness while the gate waits, the journal tail of a failed instance),
``vllm_head_listen`` (a head whose engine exits before it opens its RPC port) and ``systemd_unit`` (a failed
start's story) ask the node the same way: ``systemctl show`` and ``journalctl`` through the action's
connection (``run(command) -> result dict``). The converged record (:mod:`provision.converge.record`) parses
what ``systemctl show`` printed on the node here.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SHOW = ("ActiveState", "SubState", "MainPID", "NRestarts", "Result")


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B`` output (``A=x`` lines) as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_show_units(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show -p Id -p ... UNIT...`` output (one block per unit, blank-line separated) by unit Id;
    a block without an ``Id`` is left out, and of two blocks of one unit the first counts."""
    units: dict[str, dict[str, str]] = {}
    for block in text.split("\n\n"):
        shown = parse_show(block)
        if "Id" in shown:
            units.setdefault(shown["Id"], shown)
    return units


def describe_unit(state: Mapping[str, str]) -> str:
    """``active/running, pid 123`` or ``activating/auto-restart, 2 restart(s), result signal``."""
    text = f"{state.get('ActiveState', '?')}/{state.get('SubState', '?')}"
    if state.get("MainPID", "0") not in ("", "0"):
        text += f", pid {state['MainPID']}"
    if state.get("NRestarts", "0") not in ("", "0"):
        text += f", {state['NRestarts']} restart(s)"
    if state.get("Result", "success") not in ("", "success"):
        text += f", result {state['Result']}"
    return text


class UnitWatch:
    """Liveness and log of one systemd unit on the node, read over the connection.

    ``alive()`` is what the gate asks after each probe: the unit is active/running and its main process is
    the one first seen (a restart by ``Restart=on-failure`` means the engine died). It asks the node at most
    every ``every_s`` seconds: a refused connect costs microseconds, an SSH round trip does not.
    """

    def __init__(
        self,
        run: Callable[[str], dict[str, Any]],
        unit: str,
        *,
        every_s: float,
        track_pid: bool,
        extra: tuple[str, ...] = (),
    ):
        self._run = run
        self.unit = unit
        self.every_s = every_s
        self.track_pid = track_pid
        self.extra = extra  # more properties to read with each ask (``state``)
        self.first_pid: str | None = None
        self.state: dict[str, str] = {}
        self._asked_at: float | None = None
        self._alive = False

    def refresh(self) -> dict[str, str]:
        # Imported here: every provision verb loads the record, which parses with this module, and
        # ansible.errors would cost each ~0.1 s.
        from ansible.errors import AnsibleActionFail

        props = " ".join(f"-p {name}" for name in (*SHOW, *self.extra))
        done = self._run(f"systemctl show {props} {shlex.quote(self.unit)}")
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"cannot ask systemd about {self.unit}: {done.get('stderr') or done.get('stdout')}"
            )
        self.state = parse_show(str(done.get("stdout", "")))
        self._asked_at = time.monotonic()
        pid = self.state.get("MainPID", "0")
        running = self.state.get("ActiveState") == "active" and self.state.get("SubState") == "running"
        if running and self.first_pid is None and pid != "0":
            self.first_pid = pid
        same = not self.track_pid or self.first_pid is None or pid == self.first_pid
        self._alive = running and pid != "0" and same
        return self.state

    def alive(self) -> bool:
        if self._asked_at is None or time.monotonic() - self._asked_at >= self.every_s:
            self.refresh()
        return self._alive

    def gone(self) -> str:
        """Empty while the unit runs or is still starting (``ExecStartPre``); else what it is now, from the
        last ask: stopped, failed, waiting to restart (``Restart=on-failure``), or running another main
        process than the first seen (``track_pid``: it restarted, the engine exited)."""
        starting = (
            self.state.get("ActiveState") == "activating" and self.state.get("SubState") != "auto-restart"
        )
        if self._alive or starting:
            return ""
        pid = self.state.get("MainPID", "0")
        restarted = self.track_pid and self.first_pid is not None and pid not in ("", "0", self.first_pid)
        return f"{self.unit}: {describe_unit(self.state)}" + (
            ", restarted since first seen" if restarted else ""
        )

    def journal(self, lines: int) -> list[str]:
        unit = shlex.quote(self.unit)
        done = self._run(f"SYSTEMD_COLORS=0 journalctl -u {unit} -n {int(lines)} --no-pager -o cat")
        text = _ANSI.sub("", str(done.get("stdout", "")) or str(done.get("stderr", "")))
        return [line.rstrip() for line in text.splitlines() if line.strip()]

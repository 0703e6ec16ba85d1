"""Show a run as it happens: a live per-host table on a terminal, plain lines elsewhere; then a recap."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from rich import box
from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table
from rich.text import Text

from provision.runner.events import Event
from provision.runner.run import RunResult, failure_message
from provision.runner.unreachable import classify


@dataclass(slots=True)
class _HostLine:
    task: str = "waiting"
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    state: str = "running"


_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


HEARTBEAT_S = 60.0
"""Off a terminal, how often a line says what a still-running task waits for (``PROVISION_HEARTBEAT_S``)."""
INFO = "provision_info"
"""A task result's line for the user (converged_state's stack report), printed as debug messages are."""

# A task that says how long it may wait: "... up to 900 s" (the health gate names its load budget so).
_BUDGET = re.compile(r"\bup to (\d+(?:\.\d+)?) ?s\b")


class _Tracker:
    """Per-host state derived from events, shared by both displays."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.hosts: dict[str, _HostLine] = {}
        self.task = ""
        self.play = ""
        self.clock = clock
        self.running: dict[str, tuple[str, float]] = {}
        """host -> (task, when it started there), while its result is not in."""

    def update(self, event: Event) -> tuple[str, str | None, Mapping[str, Any]]:
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        host = data.get("host")
        if kind == "playbook_on_play_start":
            self.play = str(data.get("name") or data.get("play") or "")
        elif kind == "playbook_on_task_start":
            self.task = _task(data)
        elif kind == "runner_on_start" and host:
            self.hosts.setdefault(host, _HostLine()).task = _task(data)
            self.running[host] = (_task(data), self.clock())
        elif kind in _RESULT_EVENTS and host:
            self.running.pop(host, None)
            line = self.hosts.setdefault(host, _HostLine())
            outcome = _RESULT_EVENTS[kind]
            res = data.get("res") or {}
            if outcome == "ok" and res.get("changed"):
                outcome = "changed"
            if outcome == "failed" and data.get("ignore_errors"):
                outcome = "ok"
            setattr(line, outcome, getattr(line, outcome) + 1)
            if outcome in ("failed", "unreachable"):
                line.state = outcome
            if outcome == "unreachable":  # its row says so until the end: nothing more runs there
                line.task = f"UNREACHABLE: {unreachable_kind(res)}"
            return kind, outcome, data
        return kind, None, data

    def waiting(self, at_least: float) -> list[str]:
        """One line per task that has been running for ``at_least`` seconds: what, where, how long, and
        the budget when the task names one."""
        now = self.clock()
        by_task: dict[str, list[tuple[str, float]]] = {}
        for host, (task, since) in sorted(self.running.items()):
            if now - since >= at_least:
                by_task.setdefault(task, []).append((host, since))
        lines = []
        for task, hosts in by_task.items():
            elapsed = now - min(since for _, since in hosts)
            budget = _BUDGET.search(task)
            of = f" of a {float(budget.group(1)):.0f} s budget" if budget else ""
            names = ", ".join(host for host, _ in hosts)
            lines.append(f"  waiting     {elapsed:.0f} s{of}: {task} on {names}")
        return lines


def unreachable_kind(res: Mapping[str, Any]) -> str:
    """What failed, in a word or three (connection refused, timed out, host key not trusted, ...)."""
    return classify(failure_message(res)).kind


def _task(data: Mapping[str, Any]) -> str:
    task = str(data.get("task") or data.get("name") or "")
    role = data.get("role")
    return f"{role} : {task}" if role and not task.startswith(f"{role} :") else task


class LineProgress:
    """Quiet, line-based progress for logs and CI: task banners and every non-ok result, and every
    ``heartbeat_s`` a line per task still running (a health gate waits up to its load budget, silently
    otherwise). ``verbose`` (``-v``...): ansible-playbook's own output instead, as it prints it."""

    def __init__(
        self,
        stream: TextIO,
        *,
        verbose: bool = False,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.verbose = verbose
        self.heartbeat_s = heartbeat_s
        self.tracker = _Tracker(clock)
        self._last_task = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)

    def __enter__(self) -> LineProgress:
        if self.heartbeat_s > 0:
            self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join(timeout=5)
        self.stream.flush()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            self.beat()

    def beat(self) -> None:
        """Say what has been running for a heartbeat or longer."""
        with self._lock:
            lines = self.tracker.waiting(self.heartbeat_s)
        for line in lines:
            self._write(line)

    def __call__(self, event: Event) -> None:
        with self._lock:
            kind, outcome, data = self.tracker.update(event)
        if self.verbose:
            text = str(event.get("stdout") or "")
            if text:
                self._write(text)
            return
        if kind == "playbook_on_play_start":
            self._write(f"PLAY {self.tracker.play}")
        elif kind == "playbook_on_task_start":
            self._last_task = self.tracker.task
        elif outcome in ("changed", "failed"):
            host = data.get("host")
            self._write(f"  {host:<16} {outcome:<11} {_task(data)}")
        elif outcome == "unreachable":
            host = data.get("host")
            self._write(
                f"  {host:<16} {outcome:<11} {_task(data)} ({unreachable_kind(data.get('res') or {})})"
            )
        elif outcome == "ok" and kind == "runner_on_ok":
            res = data.get("res") or {}
            # a debug task's message, or the line a provision action has for the user (provision_info)
            msg = res.get("msg") if data.get("task_action") == "ansible.builtin.debug" else res.get(INFO)
            if msg:
                self._write(f"  {data.get('host'):<16} {'info':<11} {msg}")

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()


class LiveProgress:
    """A live table: one row per host with its current task and ok/changed/failed/unreachable counts;
    ``verbose`` (``-v``...): ansible-playbook's own output printed above it, as it prints it."""

    def __init__(self, console: RichConsole, *, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.tracker = _Tracker()
        self.live = Live(self._table(), console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> LiveProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._table())
        self.live.__exit__(None, None, None)

    def __call__(self, event: Event) -> None:
        self.tracker.update(event)
        text = str(event.get("stdout") or "") if self.verbose else ""
        if text:
            self.live.console.print(Text.from_ansi(text), highlight=False)
        self.live.update(self._table())

    def _table(self) -> Table:
        table = Table(title=self.tracker.play or "starting", title_justify="left", expand=False)
        for column in ("host", "ok", "changed", "failed", "unreach.", "current task"):
            table.add_column(column, justify="right" if column not in ("host", "current task") else "left")
        for host, line in sorted(self.tracker.hosts.items()):
            style = "red" if line.state in ("failed", "unreachable") else None
            table.add_row(
                host,
                str(line.ok),
                f"[yellow]{line.changed}[/]" if line.changed else "0",
                f"[red]{line.failed}[/]" if line.failed else "0",
                f"[red]{line.unreachable}[/]" if line.unreachable else "0",
                line.task,
                style=style,
            )
        return table


def recap_table(result: RunResult, *, ascii_only: bool = False) -> Table:
    title = f"{'PLAN' if result.check else 'RECAP'} {result.playbook}  ({result.seconds:.1f} s)"
    table = Table(title=title, title_justify="left", box=box.ASCII if ascii_only else box.HEAVY_HEAD)
    for column in ("host", "ok", "changed", "failed", "unreachable", "skipped", "result"):
        table.add_column(column, justify="left" if column in ("host", "result") else "right")
    for host, stats in sorted(result.hosts.items()):
        verdict = "ok" if stats.healthy else ("UNREACHABLE" if stats.unreachable else "FAILED")
        table.add_row(
            host,
            str(stats.ok),
            str(stats.changed),
            str(stats.failed),
            str(stats.unreachable),
            str(stats.skipped),
            verdict,
            style=None if stats.healthy else "red",
        )
    return table

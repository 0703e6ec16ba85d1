"""Show a run as it happens: a live per-host table on a terminal, plain lines elsewhere; then a recap."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from rich import box
from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table

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


class _Tracker:
    """Per-host state derived from events, shared by both displays."""

    def __init__(self) -> None:
        self.hosts: dict[str, _HostLine] = {}
        self.task = ""
        self.play = ""

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
        elif kind in _RESULT_EVENTS and host:
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


def unreachable_kind(res: Mapping[str, Any]) -> str:
    """What failed, in a word or three (connection refused, timed out, host key not trusted, ...)."""
    return classify(failure_message(res)).kind


def _task(data: Mapping[str, Any]) -> str:
    task = str(data.get("task") or data.get("name") or "")
    role = data.get("role")
    return f"{role} : {task}" if role and not task.startswith(f"{role} :") else task


class LineProgress:
    """Quiet, line-based progress for logs and CI: task banners and every non-ok result."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tracker = _Tracker()
        self._last_task = ""

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.flush()

    def __call__(self, event: Event) -> None:
        kind, outcome, data = self.tracker.update(event)
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
        elif (
            outcome == "ok" and kind == "runner_on_ok" and data.get("task_action") == "ansible.builtin.debug"
        ):
            msg = (data.get("res") or {}).get("msg")
            if msg:
                self._write(f"  {data.get('host'):<16} {'info':<11} {msg}")

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


class LiveProgress:
    """A live table: one row per host with its current task and ok/changed/failed/unreachable counts."""

    def __init__(self, console: RichConsole) -> None:
        self.console = console
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

"""ansible-runner's events, read once: what a task did on a host, as a typed value.

ansible-runner hands every event over as a dict (``event``, ``event_data.host``, ``event_data.res`` ...).
Only :mod:`provision.runner` reads those dicts; the rest of provision (doctor, ``serve status``, the power
sampler, the converge engine) is given a :class:`TaskEvent` through :func:`on_tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

Event = Mapping[str, Any]
"""One raw ansible-runner event (what its ``event_handler`` receives)."""
Observer = Callable[[Event], None]


class Outcome(Enum):
    """What a task event says happened on its host (ansible-runner's ``runner_on_*`` events)."""

    STARTED = "runner_on_start"
    OK = "runner_on_ok"
    FAILED = "runner_on_failed"
    UNREACHABLE = "runner_on_unreachable"
    SKIPPED = "runner_on_skipped"
    ITEM_OK = "runner_item_on_ok"
    ITEM_FAILED = "runner_item_on_failed"


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One task on one host: started, or its result (``result`` is the module's ``res``)."""

    outcome: Outcome
    host: str
    action: str = ""
    """The task's action as written (``ansible.builtin.template``, ``provision.ascend.converged_state``)."""
    result: Mapping[str, Any] = field(default_factory=dict)
    ignore_errors: bool = False

    @property
    def module(self) -> str:
        """The action's short name (``template``, ``converged_state``)."""
        return self.action.rsplit(".", 1)[-1]

    @property
    def done(self) -> bool:
        """The task's result is in (ok, failed or unreachable; not a loop item's)."""
        return self.outcome in (Outcome.OK, Outcome.FAILED, Outcome.UNREACHABLE)

    @property
    def message(self) -> str:
        """The result's ``msg``, stripped ("" when it has none)."""
        return str(self.result.get("msg") or "").strip()


_OUTCOMES = {outcome.value: outcome for outcome in Outcome}


def task_event(event: Event) -> TaskEvent | None:
    """The :class:`TaskEvent` of a raw event; None for one that is not about a task on a host (playbook
    start, stats, verbose output)."""
    outcome = _OUTCOMES.get(str(event.get("event", "")))
    data: Mapping[str, Any] = event.get("event_data") or {}
    host = data.get("host")
    if outcome is None or not host:
        return None
    res = data.get("res")
    return TaskEvent(
        outcome=outcome,
        host=str(host),
        action=str(data.get("task_action") or data.get("resolved_action") or ""),
        result=res if isinstance(res, Mapping) else {},
        ignore_errors=bool(data.get("ignore_errors")),
    )


def on_tasks(handle: Callable[[TaskEvent], None], then: Observer | None = None) -> Observer:
    """An observer for :func:`~provision.runner.run.run_playbook` or :func:`~provision.runner.run.run_module`
    that gives ``handle`` each task event, typed, and every raw event to ``then`` (the live display)."""

    def observe(event: Event) -> None:
        typed = task_event(event)
        if typed is not None:
            handle(typed)
        if then is not None:
            then(event)

    return observe

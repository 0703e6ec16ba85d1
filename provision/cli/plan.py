"""``provision plan INVENTORY``: what apply would change, per host; changes nothing."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, playbook_options
from provision.cli.console import Console
from provision.runner.run import Change, RunResult


@playbook_options
def plan(
    inventory: Path | None = common.InventoryArg,
    playbook: str = typer.Option("site", "--playbook", "-p", help="Playbook under playbooks/."),
    limit: str | None = common.LimitOpt,
    tags: str | None = common.TagsOpt,
    skip_tags: str | None = common.SkipTagsOpt,
    extra_vars: list[str] = common.ExtraVarsOpt,
    forks: int | None = common.ForksOpt,
    as_json: bool = common.JsonOpt,
    verbose: int = common.VerboseOpt,
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Run the playbook in check + diff mode and list, per host, what would change. Nothing is changed.

    Exit code 0: every host planned; 1: a host failed; 2: bad input (nothing touched); 4: a host was
    unreachable (and none failed).
    """
    result = common.run_and_report(
        playbook,
        _inputs.inventories(inventory, inventories),
        verb="plan",
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check_mode=True,
        diff=True,
        forks=forks,
        as_json=as_json,
        verbosity=verbose,
        options=ansible.checked(),
    )
    if not as_json and not result.listing:
        show_plan(result, Console.for_stream(sys.stdout))
    common.finish(result)


def show_plan(result: RunResult, out: Console) -> None:
    by_host: dict[str, list[Change]] = defaultdict(list)
    for change in result.changes:
        by_host[change.host].append(change)
    unreachable = result.unreachable
    for host in sorted(result.hosts):
        changes = by_host.get(host, [])
        if host in unreachable:  # not reached: what would change there is unknown
            out.line(f"{host}: UNREACHABLE, not planned ({unreachable[host] or 'no message'})")
            continue
        failed = " (FAILED: the changes after the failed task are unknown)" if host in result.failed else ""
        out.line((f"{host}: {len(changes)} change(s)" if changes else f"{host}: no changes") + failed)
        for change in changes:
            out.line(f"  ~ {change.task}")
            for line in change.detail.splitlines():
                out.line(f"      {line}")
            for line in change.diff.splitlines():
                out.line(f"      {line}")


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)

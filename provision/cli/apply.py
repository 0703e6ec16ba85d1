"""``provision apply INVENTORY``: validate, then converge every node with playbooks/site.yml."""

from __future__ import annotations

from pathlib import Path

import typer

from provision.cli import _playbook as common


def apply(
    inventory: Path = common.InventoryArg,
    playbook: str = typer.Option("site", "--playbook", "-p", help="Playbook under playbooks/ (site, ...)."),
    limit: str | None = common.LimitOpt,
    tags: str | None = common.TagsOpt,
    skip_tags: str | None = common.SkipTagsOpt,
    extra_vars: list[str] = common.ExtraVarsOpt,
    check: bool = typer.Option(False, "--check", "-C", help="Dry run: change nothing."),
    diff: bool = typer.Option(False, "--diff", "-D", help="Show what files would change."),
    full: bool = typer.Option(
        False, "--full", help="Run site.yml on every node, even those still as their last apply left them."
    ),
    forks: int | None = common.ForksOpt,
    as_json: bool = common.JsonOpt,
    verbose: int = common.VerboseOpt,
) -> None:
    """Converge every node: validate the inventory, run the playbook with live progress, print a recap.

    With site.yml, a node whose record shows it as the last apply left it (same inputs, same files, units,
    packages, NPUs; endpoints ready) is verified in one command instead of converged again; --full runs
    site.yml everywhere.

    Exit code 0: every host ok; 1: a host failed or was unreachable; 2: bad input (nothing touched).
    """
    result = common.run_and_report(
        playbook,
        inventory,
        verb="apply",
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check_mode=check,
        diff=diff,
        forks=forks,
        as_json=as_json,
        verbosity=verbose,
        full=full,
    )
    common.finish(result)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)

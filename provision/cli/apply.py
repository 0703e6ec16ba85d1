"""``provision apply INVENTORY``: validate, then converge every node with playbooks/site.yml."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from provision.ansible_config import use_run_config
from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, playbook_options
from provision.converge.engine import converge, fast_path_refusal
from provision.inventory.validate import Resolved
from provision.runner.events import Observer
from provision.runner.run import RunResult


@playbook_options
def apply(
    inventory: Path | None = common.InventoryArg,
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
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Converge every node: validate the inventory, run the playbook with live progress, print a recap.

    With site.yml, a node whose record shows it as the last apply left it (same inputs, same files, units,
    packages, NPUs; endpoints ready) is verified in one command instead of converged again; --full runs
    site.yml everywhere.

    Exit code 0: every host ok; 1: a host failed; 2: bad input (nothing touched); 4: a host was unreachable
    (and none failed).
    """
    use_run_config()  # before Ansible is imported: the records check runs its tasks in this process
    result = common.run_and_report(
        playbook,
        _inputs.inventories(inventory, inventories),
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
        options=ansible.checked(),
        runs=Converging(full),
    )
    common.finish(result)


class Converging:
    """An apply of all of site.yml (:func:`fast_path_refusal` names no reason against it) goes through
    :func:`provision.converge.engine.converge`: nodes still as their record says are verified, not converged
    again (unless ``full``), and the nodes it converges are recorded. Any other apply runs plainly."""

    def __init__(self, full: bool) -> None:
        self.full = full

    def __call__(
        self, run: common.PlaybookRun, inventory: Resolved, sources: list[Path], observer: Observer
    ) -> RunResult:
        refusal = fast_path_refusal(
            run.playbook, tags=run.tags, skip_tags=run.skip_tags, extra_vars=run.given_extra_vars,
            check=run.check, options=run.options,
        )  # fmt: skip
        if refusal is not None:
            return common.plainly(run, inventory, sources, observer)
        with tempfile.TemporaryDirectory(prefix="provision-apply-") as scratch:
            return converge(
                inventory, sources, scratch=Path(scratch), limit=run.limit, forks=run.forks,
                verbosity=run.verbosity, observer=observer, full=self.full, diff=run.diff,
                options=run.options, validated=run.validated,
            )  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)

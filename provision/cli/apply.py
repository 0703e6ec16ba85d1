"""``provision apply INVENTORY``: validate, then converge every node with playbooks/site.yml."""

from __future__ import annotations

from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common


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
    user: str | None = common.UserOpt,
    private_key: Path | None = common.PrivateKeyOpt,
    ssh_common_args: str | None = common.SshCommonArgsOpt,
    ask_pass: bool = common.AskPassOpt,
    connection_password_file: Path | None = common.ConnectionPasswordFileOpt,
    become: bool = common.BecomeOpt,
    ask_become_pass: bool = common.AskBecomePassOpt,
    become_password_file: Path | None = common.BecomePasswordFileOpt,
    vault_id: list[str] = common.VaultIdOpt,
    vault_password_file: list[Path] = common.VaultPasswordFileOpt,
    ask_vault_pass: bool = common.AskVaultPassOpt,
) -> None:
    """Converge every node: validate the inventory, run the playbook with live progress, print a recap.

    With site.yml, a node whose record shows it as the last apply left it (same inputs, same files, units,
    packages, NPUs; endpoints ready) is verified in one command instead of converged again; --full runs
    site.yml everywhere.

    Exit code 0: every host ok; 1: a host failed or was unreachable; 2: bad input (nothing touched).
    """
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
        options=_inputs.ansible_options(
            user=user,
            private_key=private_key,
            ssh_common_args=ssh_common_args,
            become=become,
            ask_pass=ask_pass,
            ask_become_pass=ask_become_pass,
            connection_password_file=connection_password_file,
            become_password_file=become_password_file,
            vault_ids=vault_id,
            vault_password_files=vault_password_file,
            ask_vault_pass=ask_vault_pass,
        ),
        full=full,
    )
    common.finish(result)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)

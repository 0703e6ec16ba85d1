"""``provision validate INVENTORY``: check the inventory; contact no host."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, vault_options
from provision.cli.console import Console
from provision.inventory.validate import InvalidInventory, check


@vault_options
def validate(
    inventory: Path | None = common.InventoryArg,
    as_json: bool = typer.Option(
        False, "--json", help="Print the verdict as JSON on stdout (the problems too, exit 2)."
    ),
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Validate an inventory: every problem at once, each naming file, host or group, and field. Vault
    values are decrypted and checked as the roles will see them.

    Exit code 0: valid; 2: problems (each named), or bad options.
    """
    sources = _inputs.inventories(inventory, inventories)
    options = ansible.checked()
    try:
        inv = check(sources, options.vault)
    except InvalidInventory as exc:
        if not as_json:
            raise
        problems = [issue.to_json() for issue in exc.issues]
        typer.echo(
            json.dumps({"ok": False, "sources": list(map(str, sources)), "problems": problems}, indent=2)
        )
        raise typer.Exit(exc.exit_code) from None
    groups = sorted(set(inv.groups) - {"all", "ungrouped"})
    if as_json:
        summary = {
            "ok": True,
            "sources": list(map(str, sources)),
            "hosts": sorted(inv.hosts),
            "groups": groups,
        }
        typer.echo(json.dumps({**summary, "problems": []}, indent=2))
        return
    Console.for_stream().line(
        f"{', '.join(map(str, sources))}: ok ({len(inv.hosts)} host(s), {len(inv.groups) - 2} group(s)); "
        "no host was contacted"
    )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)

"""``provision validate INVENTORY``: check the inventory; contact no host."""

from __future__ import annotations

from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, vault_options
from provision.cli.console import Console
from provision.inventory.validate import check


@vault_options
def validate(
    inventory: Path | None = common.InventoryArg,
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Validate an inventory: every problem at once, each naming file, host or group, and field. Vault
    values are decrypted and checked as the roles will see them."""
    sources = _inputs.inventories(inventory, inventories)
    options = ansible.checked()
    inv = check(sources, options.vault)
    Console.for_stream().line(
        f"{', '.join(map(str, sources))}: ok ({len(inv.hosts)} host(s), {len(inv.groups) - 2} group(s)); "
        "no host was contacted"
    )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)

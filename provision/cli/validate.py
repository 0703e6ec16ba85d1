"""``provision validate INVENTORY``: check the inventory; contact no host."""

from __future__ import annotations

from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli.console import Console
from provision.inventory.validate import check


def validate(
    inventory: Path | None = common.InventoryArg,
    inventories: list[Path] = common.InventoriesOpt,
    vault_id: list[str] = common.VaultIdOpt,
    vault_password_file: list[Path] = common.VaultPasswordFileOpt,
    ask_vault_pass: bool = common.AskVaultPassOpt,
) -> None:
    """Validate an inventory: every problem at once, each naming file, host or group, and field. Vault
    values are decrypted and checked as the roles will see them."""
    sources = _inputs.inventories(inventory, inventories)
    options = _inputs.ansible_options(
        vault_ids=vault_id, vault_password_files=vault_password_file, ask_vault_pass=ask_vault_pass
    )
    inv = check(sources, options.vault)
    Console.for_stream().line(
        f"{', '.join(map(str, sources))}: ok ({len(inv.hosts)} host(s), {len(inv.groups) - 2} group(s)); "
        "no host was contacted"
    )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)

"""``provision validate INVENTORY``: check the inventory; contact no host."""

from __future__ import annotations

from pathlib import Path

import typer

from provision.cli.console import Console
from provision.inventory.validate import check


def validate(
    inventory: Path = typer.Argument(..., help="Ansible inventory (INI or YAML) with group_vars/host_vars."),
) -> None:
    """Validate an inventory: every problem at once, each naming file, host or group, and field."""
    inv = check(inventory)
    Console.for_stream().line(
        f"{inventory}: ok ({len(inv.hosts)} host(s), {len(inv.groups) - 2} group(s)); no host was contacted"
    )


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)

"""``provision serve key INVENTORY``: a new API key for the engines, written into the inventory
(``group_vars/<group>/vllm_serve_api_key.yml``), encrypted with ansible-vault when a vault secret is given.

``provision validate`` refuses engines that listen beyond loopback without a key; this is the short way to
give them one. The key is never printed: ``ansible-vault view FILE`` (or the file itself, unencrypted) shows
it to whoever may read it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from provision.cli._ansible_options import AnsibleArgs, vault_options
from provision.cli.console import Console
from provision.inventory.schema import HOST_GROUP
from provision.serving import apikey


@vault_options
def key(
    inventory: Path = typer.Argument(..., metavar="INVENTORY", help="Ansible inventory file or folder."),
    group: str = typer.Option(
        HOST_GROUP, "--group", "-g", help="The group whose engines the key is for (its group_vars folder)."
    ),
    rotate: bool = typer.Option(False, "--rotate", help="Replace the group's existing key."),
    *,
    ansible: AnsibleArgs,
) -> None:
    """Write a new random API key for the engines into the inventory (vault-encrypted with a vault secret)."""
    options = ansible.checked()
    written = apikey.write_key(inventory, group, options.vault.secrets(), rotate=rotate)
    out, err = Console.for_stream(sys.stdout), Console.for_stream(sys.stderr)
    what = "replaced the API key" if written.rotated else "a new API key"
    if written.vault_id is not None:
        how = f"encrypted with ansible-vault (vault id {written.vault_id})"
        out.line(f"{written.path}: {what} of group {group}, {how}")
        out.line(f"  read it: ansible-vault view {written.path}")
    else:
        out.line(f"{written.path}: {what} of group {group} (mode 0600)")
        err.line(
            f"warning: {written.path} holds the key in plain text; anyone who reads it (a copy, a backup, a "
            "repository) can use the engines. Encrypt it: ansible-vault encrypt "
            f"{written.path}, or run this again with --rotate --vault-password-file FILE"
        )
    out.line(
        f"  the engines require it from the next `provision apply {inventory} -p serve`; clients send "
        "'Authorization: Bearer KEY'"
    )


def register(serve_app: typer.Typer) -> None:
    serve_app.command("key")(key)

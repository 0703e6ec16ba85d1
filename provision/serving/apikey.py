"""A new API key for the engines, written into the inventory as a vars file of its own
(``provision serve key``).

The key goes to ``group_vars/<group>/vllm_serve_api_key.yml`` beside the inventory, which Ansible and
``provision validate`` read as any group variable: encrypted whole with ansible-vault when a vault secret is
given (the same ``--vault-id`` / ``--vault-password-file`` the runs take), else plain text, readable by its
owner only (0600). No other file is touched. Ansible reads ``group_vars/<group>/`` *instead of*
``group_vars/<group>.yml`` once the folder exists, so a group whose variables are one file is refused with
how to move them, rather than silently losing them.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provision.errors import InputError
from provision.inventory.schema import GROUP_NAME

VARIABLE = "vllm_serve_api_key"
FILE_NAME = f"{VARIABLE}.yml"
KEY_BYTES = 32
"""256 random bits; :func:`secrets.token_urlsafe` writes them as 43 characters of [A-Za-z0-9_-], which need
no quoting in an env file or a header, nor escaping in YAML's double quotes."""
# The names Ansible's host_group_vars plugin reads for a group besides its folder (YAML_FILENAME_EXTENSIONS).
_FILE_SUFFIXES = ("", ".yml", ".yaml", ".json")


@dataclass(frozen=True, slots=True)
class Written:
    path: Path
    group: str
    vault_id: str | None
    """The vault id the file is encrypted for; None: written in plain text."""
    rotated: bool


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


def inventory_folder(inventory: Path) -> Path:
    """The folder whose ``group_vars/`` Ansible reads for ``inventory`` (a file: its folder)."""
    if not inventory.exists():
        raise InputError(f"{inventory}: no such inventory")
    return inventory if inventory.is_dir() else inventory.parent


def key_path(inventory: Path, group: str) -> Path:
    """Where the key of ``group`` goes; InputError (exit 2) when Ansible would not read it there, or would
    stop reading the group's other variables."""
    if not GROUP_NAME.fullmatch(group):
        raise InputError(
            f"--group {group!r}: not a group name (letters, digits and '_', not starting with a digit)"
        )
    group_vars = inventory_folder(inventory) / "group_vars"
    folder = group_vars / group
    for suffix in _FILE_SUFFIXES:
        single = group_vars / f"{group}{suffix}"
        if single.is_file():
            raise InputError(
                f"{single}: the variables of group {group} are this one file, and Ansible reads the folder "
                f"{folder}/ instead of it once that exists (the key would hide them). Move it first "
                f"(mkdir {folder} && mv {single} {folder}/main{suffix or '.yml'}), or give the key to "
                "another group of the serving hosts (--group)"
            )
    return folder / FILE_NAME


def key_files(inventory: Path) -> list[Path]:
    """The key files this command wrote beside ``inventory`` (any group); [] when there are none."""
    try:
        folder = inventory_folder(inventory)
    except InputError:
        return []
    return sorted((folder / "group_vars").glob(f"*/{FILE_NAME}"))


def write_key(
    inventory: Path,
    group: str,
    vault_secrets: list[tuple[str, Any]],
    *,
    rotate: bool = False,
    key: str | None = None,
) -> Written:
    """Write a new key (``key``, else :func:`new_key`) for ``group``, encrypted with the one secret of
    ``vault_secrets`` ((vault id, VaultSecret) as :meth:`provision.inventory.vault.Vault.secrets` gives them),
    plain when there is none. An existing key file is replaced only with ``rotate``."""
    path = key_path(inventory, group)
    if path.exists() and not rotate:
        raise InputError(
            f"{path}: group {group} has an API key already; --rotate replaces it (the next serve restarts "
            "the engines with the new key, and every client needs it)"
        )
    if len(vault_secrets) > 1:
        ids = ", ".join(label for label, _ in vault_secrets)
        raise InputError(
            f"several vault secrets ({ids}): give the one to encrypt the key with, as a single --vault-id "
            "or --vault-password-file"
        )
    value = key if key is not None else new_key()
    text = (
        f"# The API key of the engines of group {group} (written by `provision serve key`): clients send it\n"
        "# as 'Authorization: Bearer KEY'. Rotate it with `provision serve key INVENTORY --rotate`.\n"
        + f'{VARIABLE}: "{value}"\n'
    )
    if yaml.safe_load(text) != {VARIABLE: value}:  # a given key that YAML would change (quotes, escapes)
        raise InputError("the API key must be letters, digits, '-', '_' and '.' only")
    vault_id: str | None = None
    body = text.encode("utf-8")
    if vault_secrets:
        from ansible.errors import AnsibleError
        from ansible.parsing.vault import VaultLib

        vault_id, secret = vault_secrets[0]
        label = None if vault_id == "default" else vault_id
        try:
            body = VaultLib(secrets=vault_secrets).encrypt(text, secret=secret, vault_id=label)
        except AnsibleError as exc:
            raise InputError(f"{path}: cannot encrypt with vault id {vault_id}: {exc}") from None
    _write_private(path, body)
    return Written(path=path, group=group, vault_id=vault_id, rotated=rotate)


def shell_read(path: Path) -> str:
    """A shell command that prints the key of ``path`` (for ``export VLLM_API_KEY=$(...)``)."""
    pick = f"sed -n 's/^{VARIABLE}: \"\\(.*\\)\"$/\\1/p'"
    try:
        encrypted = path.read_bytes().startswith(b"$ANSIBLE_VAULT")
    except OSError:
        encrypted = False
    return f"ansible-vault view {path} | {pick}" if encrypted else f"{pick} {path}"


def _write_private(path: Path, body: bytes) -> None:
    """``body`` into ``path``, mode 0600 from its first byte, replacing it in one step (no half-written key,
    no moment when the key is readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(body)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

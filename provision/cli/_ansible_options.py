"""ansible-playbook's connection, become and vault options, declared once for every verb that runs Ansible.

A verb takes them by naming a keyword-only parameter ``ansible: AnsibleArgs`` and wearing
:func:`connection_options` (apply, plan, doctor, ``serve status``: all eleven) or :func:`vault_options`
(validate, ``serve explain``, ``serve key``, ``bundle``: the inventory is read, no host is contacted).
The decorator shows Typer the options (after the verb's own, in the order below) and hands the verb their
values as one :class:`AnsibleArgs`; :meth:`AnsibleArgs.checked` turns them into the runner's
:class:`~provision.runner.options.AnsibleOptions` where the verb checked its inputs before.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import typer

from provision.cli import _inputs
from provision.runner.options import AnsibleOptions

F = TypeVar("F", bound=Callable[..., Any])

PARAMETER = "ansible"
"""The keyword-only parameter of a verb that receives the options."""


# ansible-playbook's own option names and meanings.
_USER = typer.Option(None, "--user", "-u", help="Connect as this user (the inventory's ansible_user wins).")
_PRIVATE_KEY = typer.Option(None, "--private-key", "--key-file", help="SSH private key file.")
_SSH_COMMON_ARGS = typer.Option(None, "--ssh-common-args", help="Extra arguments for ssh, sftp and scp.")
_ASK_PASS = typer.Option(False, "--ask-pass", "-k", help="Ask for the SSH password.")
_CONNECTION_PASSWORD_FILE = typer.Option(
    None, "--connection-password-file", "--conn-pass-file", help="File holding the SSH password."
)
_BECOME = typer.Option(False, "--become", "-b", help="Run tasks with become (sudo).")
_ASK_BECOME_PASS = typer.Option(False, "--ask-become-pass", "-K", help="Ask for the become password.")
_BECOME_PASSWORD_FILE = typer.Option(
    None, "--become-password-file", "--become-pass-file", help="File holding the become password."
)
_VAULT_ID = typer.Option(
    [], "--vault-id", help="Vault identity [LABEL@]FILE, LABEL@SCRIPT or LABEL@prompt (repeatable)."
)
_VAULT_PASSWORD_FILE = typer.Option(
    [], "--vault-password-file", "--vault-pass-file", help="Vault password file (repeatable)."
)
_ASK_VAULT_PASS = typer.Option(False, "--ask-vault-pass", "-J", help="Ask for the vault password.")


def _connection(option: Any) -> dict[str, Any]:
    return {"option": option}


def _vault(option: Any) -> dict[str, Any]:
    return {"option": option, "vault": True}


@dataclass(frozen=True)
class AnsibleArgs:
    """What the user gave of ansible-playbook's options, unchecked: one field per option, in the order the
    verbs' help lists them."""

    user: str | None = field(default=None, metadata=_connection(_USER))
    private_key: Path | None = field(default=None, metadata=_connection(_PRIVATE_KEY))
    ssh_common_args: str | None = field(default=None, metadata=_connection(_SSH_COMMON_ARGS))
    ask_pass: bool = field(default=False, metadata=_connection(_ASK_PASS))
    connection_password_file: Path | None = field(
        default=None, metadata=_connection(_CONNECTION_PASSWORD_FILE)
    )
    become: bool = field(default=False, metadata=_connection(_BECOME))
    ask_become_pass: bool = field(default=False, metadata=_connection(_ASK_BECOME_PASS))
    become_password_file: Path | None = field(default=None, metadata=_connection(_BECOME_PASSWORD_FILE))
    vault_id: list[str] = field(default_factory=list, metadata=_vault(_VAULT_ID))
    vault_password_file: list[Path] = field(default_factory=list, metadata=_vault(_VAULT_PASSWORD_FILE))
    ask_vault_pass: bool = field(default=False, metadata=_vault(_ASK_VAULT_PASS))

    def checked(self) -> AnsibleOptions:
        """The options checked (a missing file, a prompt without a terminal: InputError, exit 2)."""
        return _inputs.ansible_options(
            user=self.user,
            private_key=self.private_key,
            ssh_common_args=self.ssh_common_args,
            become=self.become,
            ask_pass=self.ask_pass,
            ask_become_pass=self.ask_become_pass,
            connection_password_file=self.connection_password_file,
            become_password_file=self.become_password_file,
            vault_ids=self.vault_id,
            vault_password_files=self.vault_password_file,
            ask_vault_pass=self.ask_vault_pass,
        )


def connection_options(verb: F) -> F:
    """``verb`` taking all of ansible-playbook's connection, become and vault options."""
    return _taking(verb, vault_only=False)


def vault_options(verb: F) -> F:
    """``verb`` taking the vault options only (it reads the inventory, contacts no host)."""
    return _taking(verb, vault_only=True)


def _taking(verb: F, *, vault_only: bool) -> F:
    hints = typing.get_type_hints(AnsibleArgs)
    chosen = [f for f in fields(AnsibleArgs) if f.metadata.get("vault") or not vault_only]
    signature = inspect.signature(verb, eval_str=True)
    if PARAMETER not in signature.parameters:
        raise TypeError(f"{verb.__qualname__} has no keyword-only parameter {PARAMETER!r}")
    own = [p for p in signature.parameters.values() if p.name != PARAMETER]
    keyword = inspect.Parameter.KEYWORD_ONLY
    taken = [
        inspect.Parameter(f.name, keyword, default=f.metadata["option"], annotation=hints[f.name])
        for f in chosen
    ]
    clash = {p.name for p in own} & {p.name for p in taken}
    if clash:
        raise TypeError(f"{verb.__qualname__}: parameters {sorted(clash)} are Ansible options")

    @functools.wraps(verb)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {f.name: kwargs.pop(f.name) for f in chosen if f.name in kwargs}
        return verb(*args, **kwargs, **{PARAMETER: AnsibleArgs(**given)})

    wrapper.__signature__ = signature.replace(parameters=[*own, *taken])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **{p.name: p.annotation for p in taken},
        "return": signature.return_annotation,
    }
    return typing.cast(F, wrapper)

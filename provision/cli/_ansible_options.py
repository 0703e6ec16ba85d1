"""ansible-playbook's connection, become and vault options, declared once for every verb that runs Ansible.

A verb takes them by naming a keyword-only parameter ``ansible: AnsibleArgs`` and wearing
:func:`playbook_options` (apply, plan: all of them), :func:`connection_options` (doctor, ``serve status``:
not ``--list-hosts``, ``--list-tasks`` and ``--start-at-task``) or :func:`vault_options` (validate,
``serve explain``, ``serve key``, ``bundle``: the inventory is read, no host is contacted).
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
_USER = typer.Option(
    None,
    "--user",
    "-u",
    metavar="REMOTE_USER",
    help="Connect as this user (the inventory's ansible_user wins).",
)
_CONNECTION = typer.Option(
    None, "--connection", "-c", metavar="CONNECTION", help="Connection type to use (default: ssh)."
)
_TIMEOUT = typer.Option(
    None,
    "--timeout",
    "-T",
    metavar="TIMEOUT",
    min=1,
    help="Seconds to wait for a connection (Ansible's timeout).",
)
_BECOME_USER = typer.Option(
    None,
    "--become-user",
    metavar="BECOME_USER",
    help="Run operations as this user with become (default root).",
)
_LIST_HOSTS = typer.Option(
    False, "--list-hosts", help="List the hosts the playbook would run on; run nothing."
)
_LIST_TASKS = typer.Option(False, "--list-tasks", help="List the playbook's tasks; run nothing.")
_START_AT_TASK = typer.Option(
    None, "--start-at-task", metavar="START_AT_TASK", help="Start the playbook at the task of this name."
)
_PRIVATE_KEY = typer.Option(
    None, "--private-key", "--key-file", metavar="PRIVATE_KEY_FILE", help="SSH private key file."
)
_SSH_COMMON_ARGS = typer.Option(
    None, "--ssh-common-args", metavar="SSH_COMMON_ARGS", help="Extra arguments for ssh, sftp and scp."
)
_ASK_PASS = typer.Option(False, "--ask-pass", "-k", help="Ask for the SSH password.")
_CONNECTION_PASSWORD_FILE = typer.Option(
    None,
    "--connection-password-file",
    "--conn-pass-file",
    metavar="CONNECTION_PASSWORD_FILE",
    help="File holding the SSH password.",
)
_BECOME = typer.Option(False, "--become", "-b", help="Run tasks with become (sudo).")
_ASK_BECOME_PASS = typer.Option(False, "--ask-become-pass", "-K", help="Ask for the become password.")
_BECOME_PASSWORD_FILE = typer.Option(
    None,
    "--become-password-file",
    "--become-pass-file",
    metavar="BECOME_PASSWORD_FILE",
    help="File holding the become password.",
)
_VAULT_ID = typer.Option(
    [],
    "--vault-id",
    metavar="VAULT_IDS",
    help="Vault identity [LABEL@]FILE, LABEL@SCRIPT or LABEL@prompt (repeatable).",
)
_VAULT_PASSWORD_FILE = typer.Option(
    [],
    "--vault-password-file",
    "--vault-pass-file",
    metavar="VAULT_PASSWORD_FILES",
    help="Vault password file (repeatable).",
)
_ASK_VAULT_PASS = typer.Option(False, "--ask-vault-pass", "-J", help="Ask for the vault password.")


def _connection(option: Any) -> dict[str, Any]:
    return {"option": option, "kind": "connection"}


def _playbook(option: Any) -> dict[str, Any]:
    return {"option": option, "kind": "playbook"}


def _vault(option: Any) -> dict[str, Any]:
    return {"option": option, "kind": "vault"}


_KINDS = {
    "playbook": {"connection", "playbook", "vault"},
    "connection": {"connection", "vault"},
    "vault": {"vault"},
}


@dataclass(frozen=True)
class AnsibleArgs:
    """What the user gave of ansible-playbook's options, unchecked: one field per option, in the order the
    verbs' help lists them."""

    user: str | None = field(default=None, metadata=_connection(_USER))
    connection: str | None = field(default=None, metadata=_connection(_CONNECTION))
    timeout: int | None = field(default=None, metadata=_connection(_TIMEOUT))
    private_key: Path | None = field(default=None, metadata=_connection(_PRIVATE_KEY))
    ssh_common_args: str | None = field(default=None, metadata=_connection(_SSH_COMMON_ARGS))
    ask_pass: bool = field(default=False, metadata=_connection(_ASK_PASS))
    connection_password_file: Path | None = field(
        default=None, metadata=_connection(_CONNECTION_PASSWORD_FILE)
    )
    become: bool = field(default=False, metadata=_connection(_BECOME))
    become_user: str | None = field(default=None, metadata=_connection(_BECOME_USER))
    ask_become_pass: bool = field(default=False, metadata=_connection(_ASK_BECOME_PASS))
    become_password_file: Path | None = field(default=None, metadata=_connection(_BECOME_PASSWORD_FILE))
    vault_id: list[str] = field(default_factory=list, metadata=_vault(_VAULT_ID))
    vault_password_file: list[Path] = field(default_factory=list, metadata=_vault(_VAULT_PASSWORD_FILE))
    ask_vault_pass: bool = field(default=False, metadata=_vault(_ASK_VAULT_PASS))
    list_hosts: bool = field(default=False, metadata=_playbook(_LIST_HOSTS))
    list_tasks: bool = field(default=False, metadata=_playbook(_LIST_TASKS))
    start_at_task: str | None = field(default=None, metadata=_playbook(_START_AT_TASK))

    def checked(self) -> AnsibleOptions:
        """The options checked (a missing file, a prompt without a terminal: InputError, exit 2)."""
        return _inputs.ansible_options(
            user=self.user,
            connection=self.connection,
            timeout=self.timeout,
            become_user=self.become_user,
            list_hosts=self.list_hosts,
            list_tasks=self.list_tasks,
            start_at_task=self.start_at_task,
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


def playbook_options(verb: F) -> F:
    """``verb`` (it runs a playbook) taking all of them: connection, become, vault, and ``--list-hosts``,
    ``--list-tasks``, ``--start-at-task``."""
    return _taking(verb, "playbook")


def connection_options(verb: F) -> F:
    """``verb`` (it runs a module) taking the connection, become and vault options."""
    return _taking(verb, "connection")


def vault_options(verb: F) -> F:
    """``verb`` taking the vault options only (it reads the inventory, contacts no host)."""
    return _taking(verb, "vault")


def _taking(verb: F, kind: str) -> F:
    hints = typing.get_type_hints(AnsibleArgs)
    chosen = [f for f in fields(AnsibleArgs) if f.metadata["kind"] in _KINDS[kind]]
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

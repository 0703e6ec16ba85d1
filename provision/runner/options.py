"""ansible-playbook's connection, privilege and vault options, as one value the CLI builds and the runner
hands on, and how secrets reach a run without landing in its run directory.

ansible-runner keeps a run's command line (``artifacts/<ident>/command``, with the run's environment, the
allow-list of :mod:`provision.runner.environment`) and, unless told not to, copies of what it was given
(``env/cmdline``, ``env/extravars``, ``env/passwords``).
So no secret is ever put on the command line or in the environment: extra variables typed on the command
line, passwords typed at a prompt (``-k``, ``-K``, ``--ask-vault-pass``) go into files of a private folder
outside the run directory (``--extra-vars @FILE``, ``--connection-password-file``, ``--become-password-file``,
``--vault-id LABEL@FILE``), removed when the run ends.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provision.inventory.vault import Vault

ExtraVars = Sequence[str]
"""``-e`` values as ansible-playbook takes them: ``@file``, inline YAML/JSON, ``key=value`` pairs."""


@dataclass
class AnsibleOptions:
    """What ansible-playbook's ``-u``, ``--private-key``, ``--ssh-common-args``, ``-b``, ``-k``/``-K`` (their
    passwords, already asked for) and vault options say for one command."""

    user: str | None = None
    connection: str | None = None
    timeout: int | None = None
    become_user: str | None = None
    list_hosts: bool = False
    list_tasks: bool = False
    start_at_task: str | None = None
    """``--list-hosts``, ``--list-tasks``, ``--start-at-task``: ansible-playbook's meaning (the two lists run
    nothing; :attr:`lists` says so)."""
    private_key: Path | None = None
    ssh_common_args: str | None = None
    become: bool = False
    vault: Vault = field(default_factory=Vault)
    connection_password_file: Path | None = None
    become_password_file: Path | None = None
    ask_pass: bool = False
    ask_become_pass: bool = False
    connection_password: str | None = field(default=None, repr=False)
    """What ``-k`` asked for (``ask_pass``), once asked."""
    become_password: str | None = field(default=None, repr=False)
    """What ``-K`` asked for (``ask_become_pass``), once asked."""

    @property
    def lists(self) -> bool:
        """``--list-hosts`` or ``--list-tasks``: ansible-playbook lists and runs nothing."""
        return self.list_hosts or self.list_tasks

    def env(self) -> dict[str, str]:
        """Environment of the run (nothing secret: ansible-runner writes it into the run directory)."""
        return self.vault.runner_env()

    def args(self, private: Path) -> list[str]:
        """ansible-playbook's (or ansible's) arguments; password files are written into ``private``."""
        args: list[str] = []
        if self.user:
            args += ["--user", self.user]
        if self.connection:
            args += ["--connection", self.connection]
        if self.timeout is not None:
            args += ["--timeout", str(self.timeout)]
        if self.become_user:
            args += ["--become-user", self.become_user]
        if self.list_hosts:
            args.append("--list-hosts")
        if self.list_tasks:
            args.append("--list-tasks")
        if self.start_at_task:
            args += ["--start-at-task", self.start_at_task]
        if self.private_key is not None:
            args += ["--private-key", str(self.private_key.expanduser().absolute())]
        if self.ssh_common_args:
            args += ["--ssh-common-args", self.ssh_common_args]
        if self.become:
            args.append("--become")
        connection = self.connection_password_file
        if self.connection_password is not None:
            connection = _secret_file(private, "ssh", self.connection_password)
        if connection is not None:
            args += ["--connection-password-file", str(connection.expanduser().absolute())]
        become = self.become_password_file
        if self.become_password is not None:
            become = _secret_file(private, "become", self.become_password)
        if become is not None:
            args += ["--become-password-file", str(become.expanduser().absolute())]
        return args + self.vault.runner_args(private)


@contextlib.contextmanager
def private_folder() -> Iterator[Path]:
    """A folder only this user can read, outside any run directory, removed (with its secrets) on exit."""
    with tempfile.TemporaryDirectory(prefix="provision-private-") as folder:
        yield Path(folder)


def extra_vars_args(extra_vars: ExtraVars, private: Path) -> list[str]:
    """``-e`` arguments: ``@file`` as given; what was typed on the command line through a file in
    ``private``, holding what ansible-playbook's ``load_extra_vars`` reads from the text (YAML or JSON as
    it is, ``key=value`` pairs by Ansible's ``parse_kv``), so the run reads the same variables."""
    from ansible.parsing.splitter import parse_kv

    args: list[str] = []
    for index, value in enumerate(extra_vars):
        if value.startswith("@"):
            args += ["-e", value]
            continue
        text = value if value[:1] in ("{", "[") else json.dumps(parse_kv(value))
        args += ["-e", f"@{_secret_file(private, f'extra-vars-{index}.yml', text)}"]
    return args


def _secret_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.touch(mode=0o600)  # not executable: Ansible would run an executable password file
    path.write_text(text, encoding="utf-8")
    return path

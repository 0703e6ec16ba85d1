"""Vault secrets as ansible-playbook gets them, read once per command by Ansible's own CLI machinery.

``--vault-id [LABEL@]SOURCE`` (repeatable; SOURCE a password file, a client script or ``prompt``),
``--vault-password-file FILE`` and ``--ask-vault-pass`` (or ``ANSIBLE_ASK_VAULT_PASS``), after the identities
of ``ANSIBLE_VAULT_IDENTITY_LIST`` and the file of ``ANSIBLE_VAULT_PASSWORD_FILE``:
``CLI.setup_vault_secrets`` turns them into Ansible's ``FileVaultSecret``/``PromptVaultSecret`` objects. The
inventory loader decrypts with them (whole vault files and inline ``!vault`` values alike), and the run is
given the same secrets: a file or script as the user named it, a prompted password through a private file
outside the run directory (no second prompt, nothing on disk once the run ends).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError

# The vault id SOURCEs that mean "ask the user" (--ask-vault-pass is default@prompt_ask_vault_pass).
_PROMPTS = ("prompt", "prompt_ask_vault_pass")
HINT = (
    "give the vault password with --vault-id, --vault-password-file, --ask-vault-pass "
    "or $ANSIBLE_VAULT_PASSWORD_FILE"
)


@dataclass
class Vault:
    """The vault options of one command; :meth:`secrets` reads (or asks for) the passwords once."""

    ids: tuple[str, ...] = ()
    password_files: tuple[str, ...] = ()
    ask: bool = False
    _secrets: list[tuple[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)

    def prompts(self) -> bool:
        """Whether reading the secrets asks the user (``--ask-vault-pass`` or a ``prompt`` vault id)."""
        from ansible import constants as C
        from ansible.cli import CLI

        ids = [*C.DEFAULT_VAULT_IDENTITY_LIST, *self.ids]
        return self.asks() or any(CLI.split_vault_id(slug)[1] in _PROMPTS for slug in ids)

    def asks(self) -> bool:
        """``--ask-vault-pass``, or Ansible's ``ask_vault_pass`` setting (``$ANSIBLE_ASK_VAULT_PASS``, the
        cfg): ansible-playbook's default for the option."""
        from ansible import constants as C

        return self.ask or bool(C.DEFAULT_ASK_VAULT_PASS)

    def secrets(self) -> list[tuple[str, Any]]:
        """(vault id, VaultSecret) pairs, as ansible-playbook builds them; InputError (exit 2) when a password
        file cannot be read, or a prompt has no terminal to ask on."""
        if self._secrets is not None:
            return self._secrets
        from ansible import constants as C
        from ansible.cli import CLI
        from ansible.errors import AnsibleError
        from ansible.parsing.dataloader import DataLoader
        from ansible.utils.display import Display

        if self.prompts() and not sys.stdin.isatty():
            raise InputError(
                "--ask-vault-pass/--vault-id ...@prompt: cannot ask for the vault password, stdin is not a "
                "terminal; give --vault-password-file FILE (or --vault-id LABEL@FILE) instead"
            )
        display = Display()
        original = display.warning
        display.warning = lambda *args, **kwargs: None  # the error says it
        try:
            self._secrets = CLI.setup_vault_secrets(
                DataLoader(),
                vault_ids=[*C.DEFAULT_VAULT_IDENTITY_LIST, *self.ids],
                vault_password_files=list(self.password_files),
                ask_vault_pass=self.asks(),
                auto_prompt=False,
                initialize_context=False,  # the process-wide context may be set once only
            )
        except AnsibleError as exc:
            raise InputError(f"vault password: {_first_line(exc)}") from None
        except EOFError:
            raise InputError("vault password: no password was typed") from None
        finally:
            display.warning = original
        return self._secrets

    def runner_env(self) -> dict[str, str]:
        """The run's ``ANSIBLE_VAULT_IDENTITY_LIST`` without its ``prompt`` entries (their passwords, asked
        for once here, reach the run through :meth:`runner_args`); empty when it has none."""
        from ansible import constants as C

        configured = list(C.DEFAULT_VAULT_IDENTITY_LIST)
        kept = [slug for slug in configured if _split(slug)[1] not in _PROMPTS]
        return {"ANSIBLE_VAULT_IDENTITY_LIST": ",".join(kept)} if kept != configured else {}

    def runner_args(self, private: Path) -> list[str]:
        """ansible-playbook's arguments for the same secrets; a prompted one goes into a file in ``private``
        (a folder outside the run directory that the caller removes after the run)."""
        from ansible.parsing.vault import PromptVaultSecret

        args: list[str] = []
        for slug in self.ids:
            label, source = _split(slug)
            if source not in _PROMPTS:
                named = str(Path(source).expanduser().absolute())
                args += ["--vault-id", f"{label}@{named}" if label else named]
        for name in self.password_files:
            args += ["--vault-password-file", str(Path(name).expanduser().absolute())]
        for index, (label, secret) in enumerate(self.secrets() if self.prompts() else []):
            if isinstance(secret, PromptVaultSecret):
                path = private / f"vault-{index}"
                path.touch(mode=0o600)
                path.write_bytes(secret.bytes)
                args += ["--vault-id", f"{label}@{path}"]
        return args


def _split(slug: str) -> tuple[str | None, str]:
    from ansible.cli import CLI

    label, source = CLI.split_vault_id(slug)
    return label, str(source)


def decrypted(value: Any, secrets: list[tuple[str, Any]], name: str) -> Any:
    """``value`` with every inline ``!vault`` string in it decrypted (keeping where it was written), so
    validation types what the roles will see; InputError naming the file, line and variable otherwise."""
    from ansible.errors import AnsibleError
    from ansible.module_utils._internal._datatag import AnsibleTagHelper
    from ansible.parsing.vault import EncryptedString, VaultedValue, VaultHelper, VaultLib

    if type(value) is EncryptedString:
        ciphertext = VaultHelper.get_ciphertext(value, with_tags=True)
        try:
            text = VaultLib(secrets=secrets).decrypt(ciphertext).decode("utf-8", errors="replace")
        except AnsibleError as exc:
            from provision.inventory.load import origin_of

            where = origin_of(value) or "inventory"
            reason = _first_line(exc) if secrets else "no vault password was given"
            raise InputError(
                f"{where}: {name}: an inline !vault value cannot be decrypted: {reason}; {HINT}"
            ) from None
        # VaultedValue, as Ansible's own decryption tags it: validation then knows not to print it
        vaulted = VaultedValue(ciphertext=VaultHelper.get_ciphertext(value, with_tags=False))
        return AnsibleTagHelper.tag(text, AnsibleTagHelper.tags(value) | {vaulted})
    if isinstance(value, Mapping):
        items = {key: decrypted(item, secrets, name) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return AnsibleTagHelper.tag_copy(value, items) if changed else value
    if isinstance(value, list):
        listed = [decrypted(item, secrets, name) for item in value]
        changed = any(new is not old for new, old in zip(listed, value, strict=True))
        return AnsibleTagHelper.tag_copy(value, listed) if changed else value
    return value


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0]

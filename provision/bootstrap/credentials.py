"""Credentials for first contact, and the deploy key later runs use.

A password comes from a prompt, a file or an environment variable, never from the command line (where
``ps`` and the shell history would show it). It is held in a :class:`Secret`, whose ``str``/``repr`` show
stars, and is only revealed to paramiko's ``auth_password`` and to ``sudo -S`` on the node's stdin; remote
output is scrubbed of it before it is shown (:func:`scrub`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from provision.errors import InputError

MASK = "********"


class Secret:
    """A password that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK


def scrub(text: str, secrets: list[Secret]) -> str:
    """``text`` with every secret replaced by stars (remote output shown to the user, error messages)."""
    for secret in secrets:
        value = secret.reveal()
        if value:
            text = text.replace(value, MASK)
    return text


def password_from_file(path: Path) -> Secret:
    """The first line of ``path`` (a trailing newline is not part of the password)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--password-file {path}: cannot read: {exc.strerror}") from None
    value = text.split("\n", 1)[0].removesuffix("\r")
    if not value:
        raise InputError(f"--password-file {path}: the first line is empty")
    return Secret(value)


def password_from_env(name: str) -> Secret:
    value = os.environ.get(name)
    if not value:
        raise InputError(f"--password-env {name}: the environment variable is not set or empty")
    return Secret(value)


class PasswordSource:
    """A password known up front, or asked for once, when the first host needs it (thread-safe)."""

    def __init__(self, secret: Secret | None = None, prompt: Callable[[], str] | None = None) -> None:
        self._secret = secret
        self._prompt = prompt
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self._secret is not None or self._prompt is not None

    def get(self) -> Secret | None:
        with self._lock:
            if self._secret is None and self._prompt is not None:
                value = self._prompt()
                self._prompt = None
                self._secret = Secret(value) if value else None
            return self._secret

    def known(self) -> list[Secret]:
        """The secret if it was obtained (for scrubbing); never prompts."""
        return [self._secret] if self._secret is not None else []


def load_private_key(path: Path, what: str) -> paramiko.PKey:
    """A private key file (OpenSSH or PEM; ed25519, ECDSA or RSA) without passphrase."""
    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such file") from None
    except paramiko.PasswordRequiredException:
        raise InputError(
            f"{what} {path}: the key is protected by a passphrase; give a key without one"
        ) from None
    except (paramiko.SSHException, ValueError, OSError) as exc:
        raise InputError(f"{what} {path}: not a usable private key: {exc}") from None


@dataclass(frozen=True)
class DeployKey:
    """The key the deploy user is authorized with; Ansible uses the private half."""

    path: Path
    pkey: paramiko.PKey
    public_line: str
    created: bool

    @property
    def public_blob(self) -> str:
        """The base64 part of the public key, the same whatever comment the line carries."""
        return self.public_line.split()[1]


def ensure_deploy_key(path: Path, comment: str) -> DeployKey:
    """Load the deploy key at ``path``, or generate an ed25519 pair there (private 0600, ``.pub`` beside)."""
    path = path.expanduser()
    created = False
    if not path.exists():
        if any(c.isspace() for c in str(path.absolute())):
            raise InputError(f"--deploy-key {path}: the path must not contain spaces (Ansible reads it)")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(private)
        path.with_name(path.name + ".pub").write_text(f"{public.decode()} {comment}\n", encoding="utf-8")
        created = True
    pkey = load_private_key(path, "--deploy-key")
    public_line = f"{pkey.get_name()} {pkey.get_base64()} {comment}"
    return DeployKey(path.absolute(), pkey, public_line, created)

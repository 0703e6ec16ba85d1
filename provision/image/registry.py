"""Pushing to (and pulling from) a registry, with credentials that are never printed or written.

Credentials come from the environment (``PROVISION_REGISTRY_USER`` and ``PROVISION_REGISTRY_PASSWORD`` or
``PROVISION_REGISTRY_PASSWORD_FILE``) or from an ansible-vault file holding ``registry_user`` and
``registry_password``. They travel to the engine in the API's ``X-Registry-Auth`` header of the one push or
pull that needs them: nothing is stored in ``~/.docker/config.json``, and every line that reaches the console
or a run log first goes through :class:`Redactor`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from provision.errors import InputError, ProvisionError
from provision.image.spec import split_registry

USER_ENV = "PROVISION_REGISTRY_USER"
PASSWORD_ENV = "PROVISION_REGISTRY_PASSWORD"
PASSWORD_FILE_ENV = "PROVISION_REGISTRY_PASSWORD_FILE"
VAULT_USER_KEYS = ("registry_user", "provision_registry_user")
VAULT_PASSWORD_KEYS = ("registry_password", "provision_registry_password")
MASK = "******"

Progress = Callable[[str], None]


class RegistryError(ProvisionError):
    """A push or pull failed; the message is the registry's (redacted)."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = "environment"

    def __repr__(self) -> str:  # never show the password, even in a traceback's locals
        return f"Credentials(username={self.username!r}, password={MASK!r}, source={self.source!r})"

    def auth_config(self) -> dict[str, str]:
        return {"username": self.username, "password": self.password}


class Redactor:
    """Replaces every known secret in a text by a mask. Called on each line before it is shown or logged."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True)

    def add(self, secret: str) -> None:
        if secret and len(secret) >= 3 and secret not in self._secrets:
            self._secrets = sorted([*self._secrets, secret], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text


def credentials_from_env(env: Mapping[str, str] | None = None) -> Credentials | None:
    """From ``PROVISION_REGISTRY_USER`` + ``_PASSWORD`` (or ``_PASSWORD_FILE``); None when no user is set."""
    env = os.environ if env is None else env
    user = env.get(USER_ENV, "")
    if not user:
        return None
    password = env.get(PASSWORD_ENV, "")
    if not password and env.get(PASSWORD_FILE_ENV):
        path = Path(env[PASSWORD_FILE_ENV])
        try:
            password = path.read_text().strip()
        except OSError as exc:
            raise InputError(f"{PASSWORD_FILE_ENV}={path}: {exc.strerror}") from None
    if not password:
        raise InputError(f"{USER_ENV} is set but neither {PASSWORD_ENV} nor {PASSWORD_FILE_ENV}")
    return Credentials(user, password, "environment")


def credentials_from_vault(vault_file: Path, password_file: Path | None) -> Credentials:
    """Decrypt an ansible-vault file (whole-file or inline ``!vault`` values) and take the registry keys."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import get_file_vault_secret

    password_file = password_file or _env_path("ANSIBLE_VAULT_PASSWORD_FILE")
    if password_file is None:
        raise InputError(
            f"{vault_file}: an ansible-vault file needs --vault-password-file "
            "(or $ANSIBLE_VAULT_PASSWORD_FILE)"
        )
    loader = DataLoader()
    try:
        secret = get_file_vault_secret(filename=str(password_file), loader=loader)
        secret.load()
        loader.set_vault_secrets([("default", secret)])
        data = loader.load_from_file(str(vault_file))
    except AnsibleError as exc:
        # Ansible's messages name files and keys, never the decrypted text.
        raise InputError(f"{vault_file}: cannot decrypt with {password_file}: {exc.message}") from None
    if not isinstance(data, Mapping):
        raise InputError(
            f"{vault_file}: expected a mapping with {VAULT_USER_KEYS[0]} and {VAULT_PASSWORD_KEYS[0]}"
        )
    user = _first(data, VAULT_USER_KEYS)
    password = _first(data, VAULT_PASSWORD_KEYS)
    if not user or not password:
        raise InputError(f"{vault_file}: needs {VAULT_USER_KEYS[0]} and {VAULT_PASSWORD_KEYS[0]}")
    return Credentials(user, password, f"vault {vault_file}")


def resolve_credentials(
    vault_file: Path | None = None,
    password_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Credentials | None:
    """The vault file when given, else the environment, else None (an anonymous push)."""
    if vault_file is not None:
        return credentials_from_vault(vault_file, password_file)
    return credentials_from_env(env)


def _first(data: Mapping[Any, Any], keys: Iterable[str]) -> str:
    for key in keys:
        value = data.get(key)
        if value:
            return str(value)
    return ""


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


# ----------------------------------------------------------------------------------------- push / pull


@dataclass(frozen=True)
class PushResult:
    reference: str
    digest: str
    size: int

    @property
    def by_digest(self) -> str:
        """``registry/repo@sha256:...``: what a node pulls to get exactly this image."""
        repository = self.reference.rsplit(":", 1)[0] if _has_tag(self.reference) else self.reference
        return f"{repository}@{self.digest}"


def _has_tag(reference: str) -> bool:
    return ":" in reference.rsplit("/", 1)[-1]


@dataclass
class LayerProgress:
    """Folds the engine's push/pull stream into one line per layer state change (not per byte)."""

    states: dict[str, str] = field(default_factory=dict)

    def feed(self, event: Mapping[str, Any]) -> str | None:
        status = str(event.get("status", ""))
        layer = str(event.get("id", ""))
        if not layer or not status or status.startswith(("Pushing", "Downloading", "Extracting")):
            return None
        if self.states.get(layer) == status:
            return None
        self.states[layer] = status
        return f"{layer}: {status}"


def stream_error(event: Mapping[str, Any]) -> str | None:
    """The error message of a push/pull/build stream event, or None."""
    if "error" in event or "errorDetail" in event:
        detail = event.get("errorDetail") or {}
        return str(detail.get("message") or event.get("error") or "unknown error")
    return None


def push(
    client: docker.DockerClient,
    reference: str,
    credentials: Credentials | None,
    progress: Progress | None = None,
    redact: Redactor | None = None,
) -> PushResult:
    """Push ``repository:tag``; returns the digest the registry assigned."""
    say = progress or (lambda _text: None)
    redact = redact or Redactor([credentials.password] if credentials else [])
    repository, _, tag = reference.rpartition(":")
    if not _has_tag(reference):
        repository, tag = reference, "latest"
    registry, _path = split_registry(repository)
    if registry is None:
        raise InputError(
            f"{reference}: name a registry to push to, e.g. --repository registry.example:5000/vllm-ascend"
        )
    auth = credentials.auth_config() if credentials else None
    layers = LayerProgress()
    digest, size = "", 0
    try:
        stream = client.api.push(repository, tag=tag, auth_config=auth, stream=True, decode=True)
        for event in stream:
            error = stream_error(event)
            if error:
                raise RegistryError(redact(f"push of {reference} failed: {error}"))
            aux = event.get("aux") or {}
            if aux.get("Digest"):
                digest, size = str(aux["Digest"]), int(aux.get("Size") or 0)
            line = layers.feed(event)
            if line:
                say(redact(line))
    except docker.errors.APIError as exc:
        raise RegistryError(redact(f"push of {reference} failed: {exc.explanation or exc}")) from None
    if not digest:
        raise RegistryError(f"push of {reference}: the engine reported no digest")
    return PushResult(reference=reference, digest=digest, size=size)


def pull(
    client: docker.DockerClient,
    reference: str,
    credentials: Credentials | None,
    progress: Progress | None = None,
    redact: Redactor | None = None,
) -> str:
    """Pull ``repository:tag`` or ``repository@sha256:...``; returns the local image ID."""
    say = progress or (lambda _text: None)
    redact = redact or Redactor([credentials.password] if credentials else [])
    auth = credentials.auth_config() if credentials else None
    layers = LayerProgress()
    if "@" in reference:
        repository, tag = reference, None
    elif _has_tag(reference):
        repository, _, tag = reference.rpartition(":")
    else:
        repository, tag = reference, "latest"
    try:
        for event in client.api.pull(repository, tag=tag, auth_config=auth, stream=True, decode=True):
            error = stream_error(event)
            if error:
                raise RegistryError(redact(f"pull of {reference} failed: {error}"))
            line = layers.feed(event)
            if line:
                say(redact(line))
        image_id: str = client.images.get(reference).id
    except docker.errors.APIError as exc:
        raise RegistryError(redact(f"pull of {reference} failed: {exc.explanation or exc}")) from None
    return image_id

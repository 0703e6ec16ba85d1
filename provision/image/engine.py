"""The container engine behind ``provision image``: dockerd or Podman's Docker-compatible service.

One connection helper (``DOCKER_HOST`` or ``--engine``), and what the engine is: its name and version, the
API version it speaks, its own architecture, and whether it takes a build ``platform``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

from provision.errors import EnvironmentProblem
from provision.image.spec import normalize_arch

ENGINE_ENV = "PROVISION_DOCKER_HOST"
# The build API takes ``platform`` from API 1.32 on (Docker 17.09; Podman's compat API has it too).
PLATFORM_API = (1, 32)


class EngineUnavailable(EnvironmentProblem):
    """No container engine answers at the given address."""


def engine_url(explicit: str | None = None) -> str | None:
    """``--engine``, else ``$PROVISION_DOCKER_HOST``, else ``$DOCKER_HOST`` (None: the SDK's default)."""
    return explicit or os.environ.get(ENGINE_ENV) or os.environ.get("DOCKER_HOST") or None


def connect(url: str | None = None, timeout: int = 600) -> docker.DockerClient:
    """A client for the engine at ``url`` (see :func:`engine_url`); raises when nobody answers."""
    base_url = engine_url(url)
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, version="auto", timeout=timeout)
        else:
            client = docker.from_env(version="auto", timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        where = base_url or "the default socket (/var/run/docker.sock)"
        raise EngineUnavailable(
            f"no container engine answers at {where}: {exc}. Start dockerd or `podman system service`, "
            f"or point --engine / ${ENGINE_ENV} / $DOCKER_HOST at it"
        ) from exc
    return client


@dataclass(frozen=True)
class EngineInfo:
    name: str  # "docker" or "podman"
    version: str
    api_version: str
    arch: str  # Docker's names: arm64, amd64

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"

    @property
    def takes_platform(self) -> bool:
        """Whether the build API accepts a ``platform`` parameter."""
        return _version_tuple(self.api_version) >= PLATFORM_API

    def describe(self) -> str:
        return f"{self.name} {self.version} (API {self.api_version}, {self.platform})"


def engine_info(client: docker.DockerClient) -> EngineInfo:
    data: dict[str, Any] = client.version()
    components = data.get("Components") or []
    name = "podman" if any("podman" in str(c.get("Name", "")).lower() for c in components) else "docker"
    return EngineInfo(
        name=name,
        version=str(data.get("Version", "?")),
        api_version=str(client.api.api_version),
        arch=normalize_arch(str(data.get("Arch", "amd64"))),
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)

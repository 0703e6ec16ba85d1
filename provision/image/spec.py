"""What to build: an image target from the version lock, its tag, build arguments and expected labels.

Pure functions, no engine: ``provision image list`` and the CI workflow (``provision image args``) use the
same derivation as ``provision image build``, so a tag always means the same stack.

Tag: ``<repository>:<vllm-ascend>-cann<CANN>-<os>-<arch>``, with ``-a3`` (Atlas A3) or ``-310p`` (Atlas 300I
Duo) after the CANN part (``vllm-ascend:0.23.0-cann9.1.0-openeuler24.03-arm64``,
``...-cann9.1.0-a3-ubuntu22.04-arm64``, ``...-cann9.1.0-310p-openeuler24.03-arm64``).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.ascend import lock
from provision.ascend.hardware import load_hardware
from provision.errors import InputError

DEFAULT_REPOSITORY = "vllm-ascend"

# Base OS tags of the CANN images (FACTS.md §2). openEuler 22.03 bases ended with vllm-ascend v0.10.0rc1.
OS_VARIANTS = ("openeuler24.03", "ubuntu22.04")
DEFAULT_OS = "openeuler24.03"

# SoC families (NPU lines): the CANN image tag part and vllm-ascend's SOC_VERSION build setting, one per
# hardware model of provision/data/hardware.yml: 910b -> ascend910b1 (A2), a3 -> ascend910_9391 (A3),
# 310p -> ascend310p1 (300I Duo).
SOCS: Mapping[str, str] = {
    model.base_image_tag: model.image_soc_version for model in load_hardware().models.values()
}
DEFAULT_SOC = "910b"

# Kunpeng servers are arm64; the tag names the architecture the image was built for.
DEFAULT_PLATFORM = "linux/arm64"
_ARCH_ALIASES = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "amd64", "amd64": "amd64"}

# Build arguments the user may set on top of the lock (air-gapped mirrors, wheel list).
MIRROR_ARGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "APT_SOURCE", "YUM_BASEURL")


def normalize_arch(arch: str) -> str:
    """``aarch64`` → ``arm64``, ``x86_64`` → ``amd64`` (Docker's names)."""
    try:
        return _ARCH_ALIASES[arch.lower()]
    except KeyError:
        raise InputError(f"unsupported architecture {arch!r} (arm64 or amd64)") from None


def parse_platform(platform: str) -> tuple[str, str]:
    """``linux/arm64`` → ``("linux", "arm64")``; ``linux/arm64/v8`` is accepted too."""
    parts = platform.strip().split("/")
    if len(parts) < 2 or parts[0] != "linux":
        raise InputError(f"--platform {platform!r}: expected linux/arm64 or linux/amd64")
    return parts[0], normalize_arch(parts[1])


@dataclass(frozen=True)
class Target:
    """One image the lock describes: a stack, a base OS, a SoC family and an architecture."""

    stack: str
    os_variant: str = DEFAULT_OS
    soc: str = DEFAULT_SOC
    arch: str = "arm64"
    repository: str = DEFAULT_REPOSITORY

    def __post_init__(self) -> None:
        if self.stack not in lock.stack_names():
            raise InputError(f"unknown stack {self.stack!r}; the lock has: {', '.join(lock.stack_names())}")
        if self.os_variant not in OS_VARIANTS:
            raise InputError(f"unknown --os {self.os_variant!r}; choose from: {', '.join(OS_VARIANTS)}")
        if self.soc not in SOCS:
            raise InputError(f"unknown --soc {self.soc!r}; choose from: {', '.join(SOCS)}")
        object.__setattr__(self, "arch", normalize_arch(self.arch))
        validate_repository(self.repository)

    @property
    def versions(self) -> dict[str, Any]:
        return lock.stack(self.stack)

    @property
    def platform(self) -> str:
        return f"linux/{self.arch}"

    @property
    def tag(self) -> str:
        v = self.versions
        soc = "" if self.soc == DEFAULT_SOC else f"-{self.soc}"
        return f"{v['vllm_ascend']}-cann{v['cann']}{soc}-{self.os_variant}-{self.arch}"

    @property
    def reference(self) -> str:
        """``repository:tag``."""
        return f"{self.repository}:{self.tag}"

    @property
    def base_image(self) -> str:
        """The CANN base image vllm-ascend's own Dockerfile uses for this stack, SoC and OS (the lock's)."""
        return lock.base_image(self.stack, self.soc, self.os_variant)

    def build_args(self) -> dict[str, str]:
        """The Dockerfile's ARGs for this target, all from the lock."""
        v = self.versions
        return {
            "STACK": self.stack,
            "BASE_IMAGE": self.base_image,
            "CANN_VERSION": str(v["cann"]),
            "SOC": self.soc,
            "SOC_VERSION": SOCS[self.soc],
            "BASE_OS": self.os_variant,
            "PYTHON_VERSION": str(v["python"]),
            "VLLM_VERSION": str(v["vllm"]),
            "VLLM_ASCEND_VERSION": str(v["vllm_ascend"]),
            "TORCH_VERSION": str(v["torch"]),
            "TORCH_NPU_VERSION": str(v["torch_npu"]),
            "NNAL_VERSION": str(v["nnal"]),
            "DRIVER_VERSION": str(v["driver"]),
            "FIRMWARE_VERSION": str(v["firmware"]),
        }

    def labels(self) -> dict[str, str]:
        """The stack labels an image built for this target carries (see the Dockerfile's LABEL)."""
        v = self.versions
        return {
            "org.opencontainers.image.version": str(v["vllm_ascend"]),
            "provision.stack": self.stack,
            "provision.stack.vllm": str(v["vllm"]),
            "provision.stack.vllm-ascend": str(v["vllm_ascend"]),
            "provision.stack.torch": str(v["torch"]),
            "provision.stack.torch-npu": str(v["torch_npu"]),
            "provision.stack.cann": str(v["cann"]),
            "provision.stack.nnal": str(v["nnal"]),
            "provision.stack.python": str(v["python"]),
            "provision.stack.driver": str(v["driver"]),
            "provision.stack.firmware": str(v["firmware"]),
            "provision.stack.soc": self.soc,
            "provision.stack.os": self.os_variant,
        }


def default_target(
    *,
    stack: str | None = None,
    os_variant: str = DEFAULT_OS,
    soc: str = DEFAULT_SOC,
    arch: str = "arm64",
    repository: str = DEFAULT_REPOSITORY,
) -> Target:
    return Target(
        stack=lock.resolve_stack(stack).name,
        os_variant=os_variant,
        soc=soc,
        arch=arch,
        repository=repository,
    )


def lock_targets(arch: str, repository: str = DEFAULT_REPOSITORY) -> list[Target]:
    """Every image the lock describes for one architecture: stacks × base OS × SoC family."""
    return [
        Target(stack=name, os_variant=os_variant, soc=soc, arch=arch, repository=repository)
        for name in lock.stack_names()
        for os_variant in OS_VARIANTS
        for soc in SOCS
    ]


# ----------------------------------------------------------------------------------------- repository

_REPO_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")


def validate_repository(repository: str) -> None:
    """A Docker repository name: ``[registry[:port]/]path`` in lower case, without tag or digest."""
    if not repository or "@" in repository:
        raise InputError(f"--repository {repository!r}: give a repository without tag or digest")
    _registry, path = split_registry(repository)
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        raise InputError(f"--repository {repository!r}: give a repository without tag (the lock sets it)")
    for component in path.split("/"):
        if not _REPO_COMPONENT.match(component):
            raise InputError(f"--repository {repository!r}: {component!r} is not a valid name component")


def split_registry(repository: str) -> tuple[str | None, str]:
    """``127.0.0.1:5000/team/vllm-ascend`` → ``("127.0.0.1:5000", "team/vllm-ascend")``.

    The first component is a registry host when it has a dot or a port, or is ``localhost`` (Docker's rule).
    """
    first, sep, rest = repository.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, repository


# ----------------------------------------------------------------------------------------- build args


@dataclass(frozen=True)
class Overrides:
    """What a site changes on top of the lock: mirrors, the base image, the wheel list, extra ARGs."""

    base_image: str | None = None
    pip_packages: str | None = None
    mirrors: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)


def resolve_build_args(target: Target, overrides: Overrides, known: Sequence[str]) -> dict[str, str]:
    """The lock's build args with the site's overrides on top, checked against the Dockerfile's ARGs.

    Refuses credentials inside URLs: build arguments stay readable in ``docker history``.
    """
    args = target.build_args()
    if overrides.base_image:
        args["BASE_IMAGE"] = overrides.base_image
    if overrides.pip_packages is not None:
        args["PIP_PACKAGES"] = overrides.pip_packages
    for name, value in overrides.mirrors.items():
        if name not in MIRROR_ARGS:
            raise InputError(f"{name}: not a mirror setting ({', '.join(MIRROR_ARGS)})")
        args[name] = value
    for name, value in overrides.extra.items():
        args[name] = value
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise InputError(
            f"build argument(s) {', '.join(unknown)} are not ARGs of the Dockerfile "
            f"(it has: {', '.join(sorted(known))})"
        )
    for name, value in args.items():
        check_no_credentials(name, value)
    return args


def check_no_credentials(name: str, value: str) -> None:
    """Refuse ``user:password@`` inside URL-like build arguments (they would stay in the image history)."""
    for word in value.split():
        if "://" not in word and "@" not in word:
            continue
        parts = urllib.parse.urlsplit(word if "://" in word else f"//{word}")
        if parts.password:
            raise InputError(
                f"build argument {name} carries a password in a URL; build arguments stay readable in "
                "`docker history`: give the mirror without credentials (or a netrc-free internal mirror)"
            )


def parse_assignments(items: Sequence[str], what: str) -> dict[str, str]:
    """``["A=1", "B=two"]`` → ``{"A": "1", "B": "two"}`` for ``--build-arg``."""
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InputError(f"{what} {item!r}: expected NAME=VALUE")
        result[name] = value
    return result


# ----------------------------------------------------------------------------------------- the Dockerfile

_ARG_LINE = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def dockerfile_args(dockerfile: Path | str) -> dict[str, str | None]:
    """The ARGs a Dockerfile declares with their defaults (``${VAR}`` expanded; None when it has none).

    A name declared twice (before FROM and again in the stage) keeps the first default it was given.
    """
    text = dockerfile.read_text() if isinstance(dockerfile, Path) else dockerfile
    joined = re.sub(r"\\\n", " ", text)
    found: dict[str, str | None] = {}
    for line in joined.splitlines():
        match = _ARG_LINE.match(line)
        if not match:
            continue
        name, raw = match.group(1), match.group(2)
        if raw is None:
            found.setdefault(name, None)
            continue
        value = _unquote(raw.strip())
        value = _VAR.sub(lambda m: found.get(m.group(1) or m.group(2)) or "", value)
        if found.get(name) is None:
            found[name] = value
    return found


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value

"""The version lock (``provision/data/versions.yml``): known-good stack combinations, and the sha256 of
the vendor files whose values are published."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

import yaml

from provision.errors import InputError
from provision.paths import data_dir

SHA256 = re.compile(r"^[0-9a-f]{64}$")


@cache
def load_lock() -> dict[str, Any]:
    path = data_dir() / "versions.yml"
    with path.open(encoding="utf-8") as fh:
        data: dict[str, Any] = yaml.safe_load(fh)
    _check_pins(data.get("sha256"), path.name)
    return data


def _check_pins(pins: Any, where: str) -> None:
    """A malformed pin would make every install of that file fail (or, worse, match nothing the vendor
    ships): refused when the lock is read, naming the entry (every command reads the lock before it
    touches a host)."""
    if pins is None:
        return
    if not isinstance(pins, Mapping):
        raise InputError(f"{where}: sha256: must be a mapping of vendor file name -> sha256")
    for name, value in pins.items():
        if not isinstance(name, str) or not name or "/" in name or name != name.strip():
            raise InputError(f"{where}: sha256: {name!r}: not a file name (the vendor's, without a folder)")
        if not isinstance(value, str) or not SHA256.match(value):
            raise InputError(
                f"{where}: sha256.{name} = {value!r}: must be 64 lower-case hex digits (sha256sum's first "
                "column)"
            )


def sha256_pins() -> dict[str, str]:
    """The lock's ``sha256`` table: vendor file name -> the sha256 its publisher gives."""
    return dict(load_lock().get("sha256") or {})


@dataclass(frozen=True, slots=True)
class Pin:
    """What a download of one vendor file is checked against."""

    sha256: str | None
    """None: no pin, the mirror's ``sha256sums.txt`` (same origin as the file) is all there is."""
    source: str
    """Where the value comes from, as the refusal names it: the inventory variable or the lock."""


LOCK_SOURCE = "the version lock, provision/data/versions.yml"


def file_pin(name: str, pins: Mapping[str, Any] | None = None, variable: str = "") -> Pin:
    """The sha256 a download of vendor file ``name`` must have: the inventory's ``variable`` (``pins``,
    e.g. ``ascend_driver_checksums``) first (whoever writes the inventory decides, e.g. for a file the
    vendor published again), then the lock's, else none."""
    if pins and name in pins:
        return Pin(str(pins[name]).lower(), variable)
    locked = sha256_pins().get(name)
    if locked is not None:
        return Pin(locked, LOCK_SOURCE)
    return Pin(None, "")


def stack_names() -> list[str]:
    """The lock's stacks, oldest release first (``0.13.0`` before ``0.23.0`` before ``0.25.1rc1``)."""
    return sorted(load_lock()["stacks"], key=_release_key)


def stack(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = dict(load_lock()["stacks"][name])
    entry["name"] = name
    return entry


def default_stack_name() -> str:
    """The stack a host runs when its inventory names none (``provision_stack`` empty)."""
    return str(load_lock()["default"])


def default_stack() -> dict[str, Any]:
    return stack(default_stack_name())


STACK_VARIABLE = "provision_stack"
"""The inventory variable naming a host's stack of the lock."""


@dataclass(frozen=True)
class HostStack:
    """The stack a host runs and the versions the lock pins for it."""

    name: str
    chosen: bool
    """Named by the host's ``provision_stack``; False: the lock's default."""
    versions: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """The lock's entry (driver, firmware, hdk, cann, nnal, vllm, base_images ...); empty when ``name`` is
    not in the lock."""

    @property
    def known(self) -> bool:
        return bool(self.versions)

    def expected(self, key: str) -> str | None:
        """The lock's ``key`` (``driver``, ``cann`` ...) as text; None for an unknown stack or key."""
        value = self.versions.get(key)
        return None if value is None else str(value)


def resolve_stack(name: object) -> HostStack:
    """The one rule for "which stack": ``name`` (a host's ``provision_stack``) when given, else the lock's
    default. Empty and unrendered (``{{ ... }}``) values are not given: validation leaves templates to the
    play, and the roles' filters receive them rendered."""
    given = str(name) if name else ""
    if "{{" in given:
        given = ""
    chosen = given or default_stack_name()
    entry = stack(chosen) if chosen in load_lock()["stacks"] else {}
    return HostStack(chosen, bool(given), MappingProxyType(entry))


def host_stack(variables: Mapping[str, Any]) -> HostStack:
    """The stack a host's inventory variables select (:func:`resolve_stack` of ``provision_stack``)."""
    return resolve_stack(variables.get(STACK_VARIABLE))


def locked_version(key: str, stack_name: str | None = None) -> str:
    """``stacks[stack_name][key]`` of the lock (its default stack when ``stack_name`` is empty); ValueError
    for a stack or a key the lock does not have."""
    chosen = resolve_stack(stack_name)
    if not chosen.known:
        raise ValueError(
            f"provision_stack {chosen.name!r} is not in the version lock; known: {stack_names()}"
        )
    if key not in chosen.versions:
        raise ValueError(f"the version lock has no {key!r} for stack {chosen.name}")
    return str(chosen.versions[key])


REPORTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "driver": ("driver", ("ascend", "driver", "version")),
    "firmware": ("firmware", ("ascend", "firmware", "version")),
    "cann": ("CANN", ("cann", "toolkit")),
    "nnal": ("NNAL", ("cann", "nnal")),
}
"""The versions a stack report compares: their names in its line, and where provision's local facts
(``ansible_local``) hold each."""


def _local_fact(local: Mapping[str, Any], path: tuple[str, ...]) -> str:
    found: Any = local
    for key in path:
        found = found.get(key) if isinstance(found, Mapping) else None
    return str(found or "")


def stack_report(local: Mapping[str, Any] | None, stack_name: str | None = None) -> dict[str, Any]:
    """A node's ``ansible_local`` versions (provision's local facts) against the lock: ``{stack, running,
    locked, differences, line}``; ``line`` is the sentence provision prints for the node."""
    running = {key: _local_fact(local or {}, path) for key, (_, path) in REPORTED.items()}
    name = resolve_stack(stack_name).name
    locked = {key: locked_version(key, name) for key in running}
    differences = [
        f"{key} {running[key] or 'none'} (lock {locked[key]})"
        for key in running
        if running[key] != locked[key]
    ]
    versions = ", ".join(f"{label} {running[key] or 'none'}" for key, (label, _) in REPORTED.items())
    verdict = "matches the lock" if not differences else "differs from the lock: " + ", ".join(differences)
    return {
        "stack": name,
        "running": running,
        "locked": locked,
        "differences": differences,
        "line": f"stack {name}: {versions}; {verdict}",
    }


def base_image(name: str, line: str, os_variant: str) -> str:
    """The CANN base image vllm-ascend's Dockerfile for hardware ``line`` (``910b``, ``a3``, ``310p``) and
    ``os_variant`` builds on at stack ``name``'s tag; KeyError when the lock has none."""
    return str(stack(name)["base_images"][line][os_variant])


def hdk_matches(version: str, lines: Sequence[str]) -> bool:
    """Whether driver ``version`` belongs to one of the HDK ``lines`` as the vendor writes them: ``25.5.X``
    is every 25.5 release (``25.5.1``, ``25.5.RC1``), ``26.0.RC1`` that release alone (case-insensitive)."""
    have = version.strip().lower().split(".")
    for line in lines:
        want = str(line).strip().lower().split(".")
        if want[-1] == "x":
            if have[: len(want) - 1] == want[:-1] and len(have) >= len(want):
                return True
        elif have == want:
            return True
    return False


def _release_key(name: str) -> tuple[tuple[int, ...], int, int]:
    """PEP 440's order for vllm-ascend's tags: ``0.25.1rc1`` sorts after ``0.23.0``, before ``0.25.1``."""
    base, _, rc = name.partition("rc")
    numbers = tuple(int(n) for n in base.split(".") if n.isdigit())
    return numbers, 0 if rc else 1, int(rc) if rc.isdigit() else 0

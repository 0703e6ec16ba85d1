"""Load an inventory exactly as Ansible does (its own InventoryManager + VariableManager).

INI and YAML inventories, ``group_vars/`` and ``host_vars/`` beside the inventory, inline ``[group:vars]``:
whatever ``ansible-playbook -i`` would see, we see. Every value keeps its origin (file and line), which
ansible-core >= 2.19 records as a data tag; validation errors use it to name the file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.ansible_config import start_collection_loader
from provision.errors import InputError
from provision.inventory import files
from provision.inventory.vault import HINT, Vault, decrypted
from provision.paths import playbooks_dir

# The [inventory] settings of provision's ansible.cfg (a source that does not parse is an error, not a warning
# followed by an empty inventory; the plugins a run enables) -> Ansible's constant and its type. A load uses
# them where the user's config file and environment leave them unset, as a run does.
_INVENTORY_SETTINGS = {
    ("inventory", "any_unparsed_is_failed"): ("INVENTORY_ANY_UNPARSED_IS_FAILED", "bool"),
    ("inventory", "enable_plugins"): ("INVENTORY_ENABLED", "list"),
}


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a value was written: file and line (line 0 when unknown)."""

    path: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass(slots=True)
class Inventory:
    """The hosts and groups of an inventory (one source, or several, as repeated ``-i`` give them) with
    each host's variables (unmerged with roles); each group's hosts in Ansible's order (its ``groups``
    variable)."""

    source: Path
    """The first source (messages name it)."""
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    manager: Any = field(default=None, repr=False, compare=False)
    """Ansible's InventoryManager it was read with (host patterns are matched by it)."""
    loader: Any = field(default=None, repr=False, compare=False)
    """Ansible's DataLoader it was read with (its vault secrets, its base folder: the playbooks')."""
    sources: list[Path] = field(default_factory=list)
    """Every source, in the order given (``source`` first)."""

    def group_hosts(self, group: str) -> list[str]:
        return self.groups.get(group, [])

    def hosts_matching(self, pattern: str | list[str]) -> list[str]:
        """The hosts an Ansible host pattern selects (``a:b``, ``g:!h``, ``g:&h``, ``node*``, ``~regex``,
        ``g[0:2]``), by Ansible's own matching; ValueError when Ansible cannot read the pattern."""
        from ansible.errors import AnsibleError
        from ansible.inventory import manager

        if self.manager is None:
            raise ValueError("the inventory was not read by load_inventory()")
        display = manager.display
        original = display.warning
        display.warning = lambda *args, **kwargs: None  # "could not match": the caller says it better
        try:
            found = self.manager.get_hosts(pattern, ignore_limits=True, ignore_restrictions=True)
        except AnsibleError as exc:
            if "Could not match supplied host pattern" in str(exc):  # host_pattern_mismatch = error
                return []
            raise ValueError(str(exc).split("\n")[0]) from None
        finally:
            display.warning = original
        # Only the inventory's own hosts: Ansible also "matches" an implicit localhost.
        return [host.name for host in found if host.name in self.hosts]


def plain(value: Any) -> Any:
    """Ansible's tagged and lazy values as plain dicts, lists and scalars (for pydantic, JSON, display)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def host_var(hostvars: Any, host: str, name: str, default: Any = None) -> Any:
    """Variable ``name`` of ``host`` as plain data (:func:`plain`), from Ansible's ``hostvars`` inside a
    play (which templates it) or any host -> variables mapping (:attr:`Inventory.hosts`); ``default`` when
    the host, or the variable, is missing or None."""
    try:
        values = hostvars[host]
    except KeyError:
        return default
    value = values.get(name) if hasattr(values, "get") else None
    return default if value is None else plain(value)


def origin_of(value: object) -> Origin | None:
    """The file/line Ansible recorded for ``value``, if it has one (ansible-core data tags)."""
    try:
        from ansible.module_utils._internal._datatag import AnsibleTagHelper
    except ImportError:  # pragma: no cover - ansible-core < 2.19 has no data tags
        return None
    for tag in AnsibleTagHelper.tags(value):
        if type(tag).__name__ == "Origin":
            path = getattr(tag, "path", None)
            if path:
                return Origin(str(path), int(getattr(tag, "line_num", 0) or 0))
    return None


@contextlib.contextmanager
def _inventory_settings() -> Iterator[None]:
    """provision's [inventory] defaults on Ansible's constants for one load, put back after: Ansible reads its
    configuration once per process, and an environment variable set here would leak into everything else
    the process runs and override the user's ansible.cfg."""
    from ansible import constants
    from ansible.config.manager import ensure_type

    from provision.ansible_config import (
        provision_defaults,
    )  # the runner's reading: a load sees a run's settings

    left = provision_defaults()
    saved: dict[str, Any] = {}
    for setting, (constant, kind) in _INVENTORY_SETTINGS.items():
        if setting in left:
            saved[constant] = getattr(constants, constant)
            setattr(constants, constant, ensure_type(left[setting], kind))
    try:
        yield
    finally:
        for constant, value in saved.items():
            setattr(constants, constant, value)


@contextlib.contextmanager
def _captured_parse_failures() -> Iterator[list[str]]:
    """Ansible reports *why* a source failed only as a warning; capture it for our error message."""
    from ansible.inventory import manager

    captured: list[str] = []
    display = manager.display
    original = display.error_as_warning

    def capture(msg: str | None, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        causes: list[str] = []
        exc: BaseException | None = exception
        while exc is not None:
            text = str(exc).split("\nOrigin:")[0].strip()
            if text and not any(text in seen for seen in causes):
                causes.append(text)
            exc = exc.__cause__
        captured.append("; ".join(causes) or str(msg))

    display.error_as_warning = capture
    try:
        yield captured
    finally:
        display.error_as_warning = original


def load_inventory(
    path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], vault: Vault | None = None
) -> Inventory:
    """Read an inventory file, folder or script (or several, as repeated ``-i`` are) with Ansible's loader,
    decrypting with ``vault``'s secrets (by default those of ``$ANSIBLE_VAULT_*``); raise InputError naming
    the file."""
    given = [path] if isinstance(path, str | os.PathLike) else list(path)
    sources = [Path(item) for item in given]
    if not sources:
        raise InputError("no inventory given: name one (INVENTORY or -i INVENTORY)")
    for source in sources:
        files.check_source(source)
        if not source.exists():
            raise InputError(f"{source}: inventory not found")
        if source.is_file() and not os.access(source, os.R_OK):
            raise InputError(f"{source}: inventory not readable")

    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    for source in sources:
        files.check_inventory_text(source)
    secrets = (vault or Vault()).secrets()
    if any(_plugin_config(source) for source in sources):
        start_collection_loader()
    loader = DataLoader()
    loader.set_vault_secrets(secrets)
    # Ansible reads group_vars/ and host_vars/ beside the playbook too; the loader's base folder is where
    # it looks for them. Left alone, that is the current folder, which a run of the collection's playbooks
    # never reads: the playbooks' own folder is what ansible-playbook (and so apply) reads.
    loader.set_basedir(str(playbooks_dir()))
    source = sources[0]
    with _inventory_settings(), _captured_parse_failures() as failures:
        try:
            manager = InventoryManager(loader=loader, sources=[str(s.resolve()) for s in sources])
        except AnsibleError as exc:
            broken = next((s for s in sources if files.yaml_problem(s)), None)
            detail = (
                (files.yaml_problem(broken) if broken else None)
                or "; ".join(dict.fromkeys(failures))
                or str(exc).split("\n")[0]
            )
            named = broken or (source if len(sources) == 1 else None)
            shown = named if named is not None else ", ".join(map(str, sources))
            raise InputError(f"{shown}: not a valid Ansible inventory: {detail}") from None
    for each in sources:
        files.check_vars_files(each, manager.groups, manager.hosts)
    variables = VariableManager(loader=loader, inventory=manager)

    inventory = Inventory(source=source, manager=manager, loader=loader, sources=sources)
    for host in manager.get_hosts(ignore_limits=True, ignore_restrictions=True):
        try:
            host_vars = variables.get_vars(host=host, include_hostvars=False)
        except AnsibleError as exc:  # e.g. a broken group_vars YAML file, or one the vault cannot open
            where = (_broken_vars(sources, manager, loader) or _describe(exc)).rstrip(".")
            hint = f"; {HINT}" if _is_vault_error(exc) else ""
            raise InputError(
                f"{source}: variables of host {host.name} cannot be read: {where}{hint}"
            ) from None
        inventory.hosts[host.name] = {
            name: decrypted(value, secrets, name) for name, value in _own_vars(host_vars).items()
        }
    for name, group in manager.groups.items():
        # Ansible's order (the `groups` variable): multi-node serving groups are formed in it.
        inventory.groups[name] = [h.name for h in group.get_hosts()]
    return inventory


def _plugin_config(source: Path) -> bool:
    """Whether ``source`` configures an inventory plugin (``plugin: NAME``, read by the ``auto`` plugin)."""
    if source.suffix not in (".yml", ".yaml", ".config") or not source.is_file():
        return False
    try:
        return any(line.startswith("plugin:") for line in source.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return False


def _broken_vars(sources: Sequence[Path], manager: Any, loader: Any) -> str | None:
    for source in sources:
        found = files.broken_vars_file(source, manager.groups, manager.hosts, loader)
        if found:
            return found
    return None


def _is_vault_error(exc: BaseException) -> bool:
    from ansible.parsing.vault import AnsibleVaultError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AnsibleVaultError) or "vault" in str(seen).split("\n")[0].lower():
            return True
        seen = seen.__cause__
    return False


def _describe(exc: BaseException) -> str:
    """First line of an Ansible error plus the file it names (ansible-core prints ``Origin: path:line``)."""
    text = str(exc)
    first = text.split("\n")[0]
    for line in text.splitlines():
        if line.startswith("Origin: "):
            return f"{line.removeprefix('Origin: ').strip()}: {first}"
    return first


_MAGIC = {
    "inventory_file",
    "inventory_dir",
    "inventory_hostname",
    "inventory_hostname_short",
    "groups",
    "group_names",
    "playbook_dir",
    "ansible_config_file",
    "ansible_facts",
    "ansible_version",
}


def _own_vars(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    """Drop Ansible's magic variables; keep what the inventory set (values keep their origin tags)."""
    return {k: v for k, v in host_vars.items() if k not in _MAGIC and not k.startswith("ansible_play")}

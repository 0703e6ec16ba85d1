"""Validate an inventory before any host is contacted: every problem at once, each with file, scope, field.

``validate(inventory)`` returns a list of :class:`Issue`; ``check(path)`` loads and raises
:class:`InvalidInventory` (exit code 2) when there are any.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from provision.ascend import fabric, lock
from provision.errors import InputError
from provision.inventory import argspecs, files, rules
from provision.inventory.budget import short_overrides
from provision.inventory.groups import HostView, grouping_problems, inventory_view, serving_groups
from provision.inventory.load import Inventory, Origin, load_inventory, origin_of, plain
from provision.inventory.profiles import fit_problem, shipped_profiles
from provision.inventory.schema import (
    FACTS_VARIABLE,
    GROUP_NAME,
    HOST_GROUP,
    LOCKED_VERSIONS,
    OWNED_PREFIXES,
    HostSettings,
    ServingProfile,
)
from provision.inventory.vault import Vault
from provision.paths import ansible_root

Path_ = tuple[str | int, ...]
Scopes = Mapping[Origin, str]

# Variables read by play keywords (serial), which Ansible templates before any inventory variable exists.
EXTRA_VARS_ONLY = {
    name: f"a play keyword, ignored in the inventory; pass -e {name}=N"
    for name in ("ascend_driver_serial", "vllm_serve_upgrade_batch")
}
AddFn = Callable[[Path_, Any, str], None]


@dataclass(slots=True)
class Issue:
    """One problem in the inventory: where it was written, for whom, which field, what is wrong."""

    origin: Origin | None
    scopes: list[str]
    field: str
    value: Any
    message: str

    def render(self, base: Path | None = None) -> str:
        where = "-"
        if self.origin is not None:
            where = str(self.origin)
            if base is not None:
                with contextlib.suppress(ValueError):
                    where = str(Origin(str(Path(self.origin.path).relative_to(base)), self.origin.line))
        scope = _join_scopes(self.scopes)
        shown = "" if self.value is _MISSING else f" = {_show(self.value)}"
        return f"{where}: {scope}: {self.field}{shown}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The problem for ``validate --json``: file, line, hosts/groups, field, value as shown, message."""
        return {
            "file": self.origin.path if self.origin is not None else None,
            "line": self.origin.line or None if self.origin is not None else None,
            "scopes": list(self.scopes),
            "field": self.field,
            "value": None if self.value is _MISSING else _show(self.value),
            "message": self.message,
        }


class InvalidInventory(InputError):
    """The inventory has problems; ``issues`` lists them all."""

    def __init__(self, source: Path, issues: Sequence[Issue]) -> None:
        self.source = source
        self.issues = list(issues)
        base = source.parent if source.is_file() else source
        lines = [f"{source}: {len(self.issues)} problem(s) in the inventory; no host was contacted"]
        lines += [f"  {issue.render(base.resolve())}" for issue in self.issues]
        super().__init__("\n".join(lines))


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def check(path: str | Path | Sequence[str | Path], vault: Vault | None = None) -> Inventory:
    """Load (every source, decrypting with ``vault``) and validate; return the inventory or raise
    InvalidInventory (an InputError)."""
    inventory = load_inventory(path, vault)
    for source in inventory.sources:
        files.check_vars_names(source, inventory.groups, inventory.hosts)
    issues = validate(inventory)
    if issues:
        raise InvalidInventory(inventory.source, issues)
    return inventory


# What a run's playbooks are told when :func:`check` judged every variable they read
# (:func:`checked_in_full`): the roles' argument checks and preflight's inventory check, made on every node
# under plain ansible-playbook, are not made again there (docs/ansible.md, "Checked once").
VALIDATED_VARS = '{"provision_validated": true}'


def checked_in_full(inventory: Inventory) -> bool:
    """Whether :func:`validate` judged every value of a variable provision knows as the roles will read it:
    none holds a template (Ansible renders those at run time; only the roles' own checks see the result)."""
    _, known = _known_variables()
    return not any(
        rules.templates_in(value, (name,))
        for variables in inventory.hosts.values()
        for name, value in variables.items()
        if name in known
    )


def validate(inventory: Inventory) -> list[Issue]:
    report = _Report()
    scopes = _written_for(inventory.manager)
    _check_groups(inventory, report)
    for host, variables in inventory.hosts.items():
        _check_host(host, variables, report, scopes)
    _check_serving_groups(inventory, report, scopes)
    _check_fabric(inventory, report, scopes)
    return report.issues()


def _written_for(manager: Any) -> dict[Origin, str]:
    """The group or host each value written in the inventory source itself was set for: its origin is only
    a file and line (``[npu_nodes:vars]`` of an INI file), unlike group_vars/ and host_vars/ files, whose
    name says it."""
    out: dict[Origin, str] = {}
    if manager is None:
        return out

    def walk(value: Any, scope: str) -> None:
        origin = origin_of(value)
        if origin is not None:
            out.setdefault(origin, scope)
        if isinstance(value, Mapping):
            for item in value.values():
                walk(item, scope)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, scope)

    for host in manager.hosts.values():
        for value in host.vars.values():
            walk(value, f"host {host.name}")
    for name, group in manager.groups.items():
        for value in group.get_vars().values():
            walk(value, f"group {name}")
    return out


# --- collecting -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Report:
    """Issues keyed by (origin, field, message) so a group variable wrong for 40 hosts is reported once."""

    _by_key: dict[tuple[Any, ...], Issue] = field(default_factory=dict)

    def add(
        self,
        scope: str,
        field_path: str,
        value: Any,
        message: str,
        origin: Origin | None,
        raw: Any = _MISSING,
    ) -> None:
        """``raw``: the value as loaded (its tags say whether it came from the vault) if ``value`` is not."""
        if _from_vault(value if raw is _MISSING else raw, origin):
            value = _VAULTED  # a decrypted secret is named, never printed
        key = (origin, field_path, message) if origin else (scope, field_path, message)
        existing = self._by_key.get(key)
        if existing is None:
            self._by_key[key] = Issue(origin, [scope], field_path, value, message)
        elif scope not in existing.scopes:
            existing.scopes.append(scope)

    def issues(self) -> list[Issue]:
        return sorted(
            self._by_key.values(),
            key=lambda i: (i.origin.path if i.origin else "", i.origin.line if i.origin else 0, i.field),
        )


def _join_scopes(scopes: list[str]) -> str:
    hosts = [s.removeprefix("host ") for s in scopes if s.startswith("host ")]
    others = [s for s in scopes if not s.startswith("host ")]
    parts = list(others)
    if len(hosts) == 1:
        parts.append(f"host {hosts[0]}")
    elif len(hosts) > 4:
        parts.append(f"hosts {', '.join(hosts[:3])} and {len(hosts) - 3} more")
    elif hosts:
        parts.append(f"hosts {', '.join(hosts)}")
    return "; ".join(parts)


def _scope_for(host: str, origin: Origin | None, scopes: Scopes | None = None) -> str:
    """Name the group or host a value was written for, from where it was written."""
    if origin is not None and scopes and origin in scopes:
        return scopes[origin]
    if origin is not None:
        parts = Path(origin.path).parts
        for kind in ("group_vars", "host_vars"):
            if kind in parts:
                index = parts.index(kind)
                if index + 1 < len(parts):
                    name = parts[index + 1].split(".")[0]
                    return f"{'group' if kind == 'group_vars' else 'host'} {name}"
    return f"host {host}"


class _Vaulted:
    def __repr__(self) -> str:
        return "<from the vault, not shown>"


_VAULTED: Any = _Vaulted()


def _from_vault(value: Any, origin: Origin | None) -> bool:
    """Whether ``value`` was decrypted from an inline ``!vault`` or written in a vault-encrypted file."""
    from ansible.parsing.vault import VaultHelper

    if value is not _MISSING and VaultHelper.get_ciphertext(value, with_tags=False) is not None:
        return True
    return origin is not None and _encrypted_file(origin.path)


@cache
def _encrypted_file(path: str) -> bool:
    from ansible.parsing.vault import is_encrypted_file

    try:
        with open(path, "rb") as handle:
            return bool(is_encrypted_file(handle))
    except OSError:
        return False


def _show(value: Any) -> str:
    if value is _VAULTED:
        return repr(value)
    text = repr(plain(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _walk(root: Any, path: Path_) -> Any:
    """The raw value at ``path`` (or _MISSING), to find its origin."""
    node = root
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return node


def _origin_at(root: Mapping[str, Any], path: Path_) -> Origin | None:
    """Origin of the value at ``path``, else of its nearest parent that has one."""
    for depth in range(len(path), 0, -1):
        value = _walk(root, path[:depth])
        if value is not _MISSING:
            found = origin_of(value)
            if found is not None:
                return found
    return None


def _dotted(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, str) and rules.control_problem(part) is not None:
            part = repr(part)  # a key with a line break must not break the message's line
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --- groups ---------------------------------------------------------------------------------------------


def _check_groups(inventory: Inventory, report: _Report) -> None:
    source = Origin(str(inventory.source.resolve()))
    for name in inventory.groups:
        if not GROUP_NAME.fullmatch(name):
            report.add(
                f"group {name}",
                "group name",
                name,
                "invalid group name; allowed: letters, digits and '_', not starting with a digit",
                source,
            )
    if not inventory.group_hosts(HOST_GROUP):
        report.add(
            "inventory",
            f"group {HOST_GROUP}",
            _MISSING,
            f"missing or empty; put every NPU server in a [{HOST_GROUP}] group",
            source,
        )


# --- hosts ----------------------------------------------------------------------------------------------


@cache
def _role_defaults() -> dict[str, set[str]]:
    """Role name -> the variables its defaults/main.yml declares (the names users may set)."""
    out: dict[str, set[str]] = {}
    roles = ansible_root() / "roles"
    for defaults in sorted(roles.glob("*/defaults/main.yml")):
        data = yaml.load(defaults.read_text(encoding="utf-8"), Loader=files.YAML_LOADER) or {}
        out[defaults.parent.parent.name] = set(data)
    return out


@cache
def _known_variables() -> tuple[tuple[str, ...], frozenset[str]]:
    roles = _role_defaults()
    prefixes = tuple(sorted({*OWNED_PREFIXES, *(f"{role}_" for role in roles)}))
    known = set(HostSettings.model_fields)
    for names in roles.values():
        known |= names
    return prefixes, frozenset(known)


@cache
def _close_to_ours(name: str, ours: bool) -> list[str]:
    """The known variable ``name`` most likely misspells; once per name, not once per host (difflib is the
    slowest part of a large inventory's validation)."""
    _, known = _known_variables()
    return difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6 if ours else 0.9)


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


@cache
def _connection_variables() -> frozenset[str]:
    """Ansible's own variables the schema checks (ansible_host, ansible_port ...); other ansible_* are
    left to Ansible."""
    return frozenset(name for name in HostSettings.model_fields if name.startswith("ansible_"))


def _check_host(
    host: str, variables: Mapping[str, Any], report: _Report, scopes: Scopes | None = None
) -> None:
    prefixes, known = _known_variables()
    owned: dict[str, Any] = {}
    templated: dict[str, Any] = {}  # ours, computed at run time: the roles check the result

    def refuse(path: Path_, root: Mapping[str, Any], message: str) -> None:
        origin = _origin_at(root, path)
        value = _walk(root, path)
        report.add(_scope_for(host, origin, scopes), _dotted(path), value, message, origin)

    for name, value in variables.items():
        problem = rules.lookalike_problem(name)
        if problem is not None:
            refuse((name,), variables, problem)
            continue
        if name == FACTS_VARIABLE:
            # Discovered on the node: data, never a template (bootstrap writes it !unsafe).
            for path in rules.templates_in(value, (name,)):
                refuse(path, variables, _DISCOVERED_TEMPLATE)
            continue
        if name.startswith("ansible_"):
            # The interpreter is templated on the controller before every task: a template there is code
            # run on the controller, so even a templated value is checked (and refused).
            if name == "ansible_python_interpreter" or (
                name in _connection_variables() and not _templated(value)
            ):
                owned[name] = value
            continue
        ours = name.startswith(prefixes)
        # A name close to one of ours but outside our prefixes is most likely a typo (npu_pool_list).
        close = _close_to_ours(name, ours)
        if not ours and not close:
            continue
        if name in EXTRA_VARS_ONLY:
            origin = origin_of(value)
            report.add(_scope_for(host, origin, scopes), name, value, EXTRA_VARS_ONLY[name], origin)
            continue
        if name not in known:
            origin = origin_of(value)
            hint = f"did you mean {close[0]!r}?" if close else "not a variable provision knows"
            report.add(_scope_for(host, origin, scopes), name, value, f"unknown variable; {hint}", origin)
            continue
        (templated if _templated(value) else owned)[name] = value

    # Every value of ours reaches a file, a command line or a template on the node: no control character,
    # whether it is written plainly or is a template (its text stays in the result).
    for root in (owned, templated):
        for name in [n for n in root if n not in _OWN_RULES]:
            found = rules.control_problems(root[name], (name,))
            for path, message in found:
                refuse(path, root, message)
            if found:
                _drop(root, name, [path for path, _ in found])

    def add(path: Path_, value: Any, message: str) -> None:
        origin = _origin_at(owned, path)
        scope = _scope_for(host, origin, scopes)
        report.add(scope, _dotted(path), value, message, origin, _walk(owned, path))

    def scope_at(path: Path_) -> str | None:
        """The group or host the value at ``path`` was written for; None for a role's default."""
        if _walk(owned, path) is _MISSING:
            return None
        return _scope_for(host, _origin_at(owned, path), scopes)

    # The roles' argument specs type every variable a role reads, as Ansible will when the role starts, and
    # the rules bound its numbers; what fails there is left out of the schema's checks (one message per
    # mistake).
    for name in [n for n in owned if n in argspecs.role_options()]:
        found = argspecs.problems(name, owned[name])
        for path, message in found:
            add(path, _walk(owned, path), message)
        if found:
            del owned[name]

    _check_rules(owned, add)
    settings = _typed_settings(owned, add)
    _check_pools(settings, add, scope_at)
    _check_profiles(settings, add)
    _check_budgets(settings, owned, add)
    _check_versions(settings, owned, add)
    _check_open_engines(host, variables, report, scopes)


def _drop(root: dict[str, Any], name: str, paths: list[Path_]) -> None:
    """Leave out what a problem was reported for: the entries of a mapping (a profile), else the variable
    (a list's items cannot go without moving the indices later messages name)."""
    value = root[name]
    if isinstance(value, Mapping) and all(len(path) > 1 for path in paths):
        bad = {str(path[1]) for path in paths}
        root[name] = {k: v for k, v in value.items() if str(k) not in bad}
    else:
        del root[name]


_DISCOVERED_TEMPLATE = (
    "a value discovered on the node holds a template, which Ansible would run on the controller; "
    "rerun provision bootstrap (it writes discovered values !unsafe) or remove it"
)


_OWN_RULES = ("vllm_serve_env", "vllm_serve_container_args")
"""Variables whose rule checks control characters itself, next to its other checks."""


def _check_rules(owned: dict[str, Any], add: AddFn) -> None:
    """The rules (:mod:`provision.inventory.rules`) on values that reach the engine's files and command
    line: environment keys and values, container arguments, profile names. A variable with a problem is
    left out of the schema's checks."""
    checks: dict[str, Callable[[Any], list[tuple[Path_, str]]]] = {
        "vllm_serve_env": lambda value: rules.env_problems(
            value, owner="vllm_serve_env", path=("vllm_serve_env",)
        ),
        "vllm_serve_container_args": lambda value: rules.container_args_problems(
            value, ("vllm_serve_container_args",)
        ),
        "vllm_serve_profiles": _profile_name_problems,
    }
    for name, check in checks.items():
        if name not in owned:
            continue
        found = check(plain(owned[name]))
        for path, message in found:
            add(path, _walk(owned, path), message)
        if found:
            _drop(owned, name, [path for path, _ in found])


def _profile_name_problems(profiles: Any) -> list[tuple[Path_, str]]:
    if not isinstance(profiles, Mapping):
        return []  # the type check says it
    out: list[tuple[Path_, str]] = []
    for key in profiles:
        problem = rules.name_problem("profile", key)
        if problem is not None:
            out.append((("vllm_serve_profiles", str(key)), problem))
    return out


def _typed_settings(owned: Mapping[str, Any], add: AddFn) -> HostSettings:
    """Type-check field by field (pools and profiles item by item), so one bad value hides no other.

    Whatever fails is reported and left out; the cross-field checks then run on what is left.
    """
    good: dict[str, Any] = {}
    for name in HostSettings.model_fields:
        if name not in owned:
            continue
        value = owned[name]
        if name == "npu_pools_list" and isinstance(value, list):
            good[name] = [item for i, item in enumerate(value) if _typed_ok({name: [item]}, add, {name: i})]
        elif name == "vllm_serve_profiles" and isinstance(value, Mapping):
            good[name] = {k: v for k, v in value.items() if _typed_ok({name: {k: v}}, add, {})}
        elif _typed_ok({name: value}, add, {}):
            good[name] = value
    return HostSettings.model_validate(good)


def _typed_ok(candidate: Mapping[str, Any], add: AddFn, reindex: Mapping[str, int]) -> bool:
    try:
        HostSettings.model_validate(candidate)
    except ValidationError as exc:
        for error in exc.errors():
            loc = list(error["loc"])
            if loc and loc[0] in reindex and len(loc) > 1:
                loc[1] = reindex[str(loc[0])]  # the item's index in the user's list, not in our 1-item copy
            path = tuple(loc)
            value = _walk(candidate, tuple(error["loc"]))
            add(path, value, _message(error))
        return False
    return True


def _message(error: Mapping[str, Any]) -> str:
    """Pydantic's message, phrased as what is allowed."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"allowed: {ctx.get('expected')}"
    if kind == "string_type":
        return "must be a string (quote it in YAML, e.g. '9.1.0')"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be a whole number"
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind in ("list_type", "dict_type"):
        return f"must be a {'list' if kind == 'list_type' else 'mapping'}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"]).replace("Input should be", "must be").replace("Value error, ", "")


def _check_pools(settings: HostSettings, add: AddFn, scope_at: Callable[[Path_], str | None]) -> None:
    count = settings.ascend_npu_count
    count_scope = scope_at(("ascend_npu_count",))
    owner: dict[int, str] = {}
    ports: dict[int, str] = {}
    names: set[str] = set()
    # A group's pools beyond an NPU count written elsewhere (the host's own, a sub-group's): the count is the
    # odd one out, so one problem at the count, not one per device under the pools' group (right for others).
    beyond: dict[str, list[int]] = {}
    for i, pool in enumerate(settings.npu_pools_list):
        base: Path_ = ("npu_pools_list", i)
        if pool.name in names:
            add((*base, "name"), pool.name, "pool names must be unique on a host")
        names.add(pool.name)
        pool_scope = scope_at(base)
        count_is_the_cause = (
            count_scope is not None
            and pool_scope is not None
            and pool_scope != count_scope
            and not pool_scope.startswith("host ")
        )
        for j, device in enumerate(pool.devices):
            if device >= count and count_is_the_cause:
                beyond.setdefault(f"pool {pool.name!r} of {pool_scope}", []).append(device)
            elif device >= count:
                add(
                    (*base, "devices", j),
                    device,
                    f"no such NPU: the node has {count} (ids 0-{count - 1}; set ascend_npu_count if wrong)",
                )
            elif device in owner:
                add(
                    (*base, "devices", j),
                    device,
                    f"NPU {device} is already in pool {owner[device]!r}; an NPU belongs to at most one pool",
                )
            else:
                owner[device] = pool.name
        if pool.port in ports:
            add((*base, "port"), pool.port, f"port already used by pool {ports[pool.port]!r} on this host")
        ports.setdefault(pool.port, pool.name)
    if beyond:
        uses = "; ".join(
            f"{pool} uses NPU {', '.join(map(str, devices))}" for pool, devices in beyond.items()
        )
        add(
            ("ascend_npu_count",),
            count,
            f"{uses}, beyond this count (ids 0-{count - 1}): correct ascend_npu_count, or give this host "
            "its own npu_pools_list",
        )


def _check_profiles(settings: HostSettings, add: AddFn) -> None:
    profiles = {**shipped_profiles(), **settings.vllm_serve_profiles}
    for name, profile in settings.vllm_serve_profiles.items():
        base: Path_ = ("vllm_serve_profiles", name)
        if profile.quantization == "ascend" and profile.weights_quantization is None:
            add(
                (*base, "quantization"),
                profile.quantization,
                "quantization 'ascend' needs msModelSlim-quantized weights: set weights_quantization "
                "(w8a8, w4a8, w4a4, w8a8-dynamic)",
            )
    for i, pool in enumerate(settings.npu_pools_list):
        wanted = profiles.get(pool.profile) if pool.profile else None
        if wanted is not None and wanted.nodes > 1 and wanted.distributed_executor_backend == "ray":
            add(
                ("npu_pools_list", i, "profile"),
                pool.profile,
                f"profile runs on {wanted.nodes} nodes with distributed_executor_backend: ray, whose "
                "multi-node start (ray start on every node first) is not in this version: unset "
                "distributed_executor_backend for native data parallelism (a head and headless workers, "
                "docs/serving.md)",
            )
    for i, pool in enumerate(settings.npu_pools_list):
        if pool.profile is None:
            continue
        path: Path_ = ("npu_pools_list", i, "profile")
        if pool.profile not in profiles:
            allowed = ", ".join(sorted(profiles)) or "none defined"
            add(path, pool.profile, f"unknown serving profile; defined: {allowed}")
            continue
        problem = fit_problem(profiles[pool.profile], pool)
        if problem is not None:
            add(path, pool.profile, f"profile {problem}")


def _check_budgets(settings: HostSettings, owned: Mapping[str, Any], add: AddFn) -> None:
    """A timeout the inventory sets for a served pool (its profile's ``env``, ``vllm_serve_env``) that would
    end the load before the profile's load budget (:mod:`provision.inventory.budget`)."""
    profiles = {**shipped_profiles(), **settings.vllm_serve_profiles}
    extra = owned.get("vllm_serve_env")
    extra = plain(extra) if isinstance(extra, Mapping) else {}
    default = owned.get("vllm_serve_load_budget_s")
    default_s = float(default) if isinstance(default, int | float | str) and _positive(default) else None
    for i, pool in enumerate(settings.npu_pools_list):
        profile = profiles.get(pool.profile) if pool.profile else None
        if profile is None or pool.profile is None:
            continue
        for short in short_overrides(
            profile, pool.profile, pool=pool.name, extra_env=extra, default_s=default_s
        ):
            if short.source == "vllm_serve_env":
                path: Path_ = ("vllm_serve_env", short.setting)
            elif pool.profile in settings.vllm_serve_profiles:
                path = ("vllm_serve_profiles", pool.profile, "env", short.setting)
            else:
                path = ("npu_pools_list", i, "profile")
            add(path, _walk(owned, path), short.message)


def _positive(value: Any) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def _check_serving_groups(inventory: Inventory, report: _Report, scopes: Scopes) -> None:
    """Multi-node pools (profile ``nodes`` > 1) across the hosts of ``npu_nodes``: the same grouping as at run
    time (:func:`provision.inventory.groups.grouping_problems`), so a pool on 3 hosts of a 2-node profile is
    refused here, naming the file, the hosts, the pool and the field, before any host is touched."""
    hosts = inventory.group_hosts(HOST_GROUP)
    usable = {host: _groupable(host, inventory.hosts.get(host, {})) for host in hosts}
    try:
        problems = grouping_problems(inventory_view(hosts, usable))
    except (InputError, ValueError):  # what a host's own checks report already
        return
    for problem in problems:
        for host in problem.hosts:
            pools = inventory.hosts.get(host, {}).get("npu_pools_list") or []
            index = next(
                (
                    i
                    for i, item in enumerate(pools)
                    if isinstance(item, Mapping) and item.get("name") == problem.pool
                ),
                0,
            )
            variables = inventory.hosts.get(host, {})
            own = variables.get("vllm_serve_profiles")
            path: Path_ = ("npu_pools_list", index, problem.field)
            if problem.field == "profile" and isinstance(own, Mapping) and problem.profile in own:
                path = ("vllm_serve_profiles", problem.profile)  # the host's own version of the profile
            raw = {"npu_pools_list": pools, "vllm_serve_profiles": own}
            origin = _origin_at(raw, path)
            value = _walk(raw, path)
            report.add(_scope_for(host, origin, scopes), _dotted(path), value, problem.message, origin)


def _check_fabric(inventory: Inventory, report: _Report, scopes: Scopes) -> None:
    """The NPU fabric's addressing plan (:mod:`provision.ascend.fabric`): each host's ports in their
    segments, each gateway inside its segment, and no device address twice across the fleet."""
    plans: dict[str, list[fabric.Port]] = {}
    for host in inventory.group_hosts(HOST_GROUP):
        raw = inventory.hosts.get(host, {})
        variables = plain(dict(raw))
        if any(_templated(variables.get(name)) for name in fabric.VARIABLES):
            continue  # worked out at run time: the role checks the result
        if any(argspecs.problems(name, variables[name]) for name in fabric.VARIABLES if name in variables):
            continue  # the type check of the role's argument spec says it
        ports, problems = fabric.host_ports(variables)
        plans[host] = ports
        for path, message in problems:
            origin = _origin_at(raw, path)
            report.add(_scope_for(host, origin, scopes), _dotted(path), _walk(raw, path), message, origin)
    for dup in fabric.fleet_duplicates(plans):
        raw = inventory.hosts.get(dup.host, {})
        where: Path_ = (
            (fabric.ADDRESSES, dup.device) if raw.get(fabric.ADDRESSES) is not None else (fabric.NODE_INDEX,)
        )
        origin = _origin_at(raw, where)
        report.add(
            f"host {dup.host}",
            _dotted(where),
            _walk(raw, where),
            f"NPU {dup.device}'s device address {dup.address} is also NPU {dup.other_device}'s on host "
            f"{dup.other_host}: every NPU port of the fleet needs its own",
            origin,
        )


def _groupable(host: str, variables: Mapping[str, Any]) -> dict[str, Any]:
    """The host's serving variables as plain data, keeping only the pools that pass the per-host checks
    (those that do not are reported already, and must not hide the cross-host problems)."""
    view = {
        name: plain(variables[name])
        for name in ("ansible_host", "npu_pools_list", "vllm_serve_profiles", "vllm_serve_env")
        if name in variables and not _templated(variables[name])
    }
    profiles = view.get("vllm_serve_profiles")
    view["vllm_serve_profiles"] = {
        name: raw for name, raw in (profiles.items() if isinstance(profiles, Mapping) else []) if _parses(raw)
    }
    if not isinstance(view.get("vllm_serve_env", {}), Mapping):
        view["vllm_serve_env"] = {}
    pools = view.get("npu_pools_list")
    view["npu_pools_list"] = [
        item for item in (pools if isinstance(pools, list) else []) if _pool_groupable(host, item, view)
    ]
    return view


def _parses(raw: Any) -> bool:
    try:
        ServingProfile.model_validate(raw)
    except (ValidationError, ValueError):
        return False
    return True


def _pool_groupable(host: str, item: Any, view: Mapping[str, Any]) -> bool:
    single = HostView(
        host=host,
        address=host,
        pools=[item],
        profiles=view.get("vllm_serve_profiles") or {},
        env=view.get("vllm_serve_env") or {},
    )
    try:
        grouping_problems([single])
    except (InputError, ValueError):
        return False
    return True


def _check_versions(settings: HostSettings, owned: Mapping[str, Any], add: AddFn) -> None:
    stack = lock.resolve_stack(settings.provision_stack)
    stack_name = stack.name
    if not stack.known:
        names = lock.stack_names()
        add(("provision_stack",), stack_name, f"not in the version lock; known: {', '.join(names)}")
        return
    if settings.provision_allow_unlocked_versions:
        return
    pinned = stack.versions
    for variable, key in LOCKED_VERSIONS.items():
        value = getattr(settings, variable)
        if value is None or str(value) == str(pinned[key]):
            continue
        if key == "driver":
            # The stack's CANN works with a range of HDK releases, not one: any driver of those lines.
            if not lock.hdk_matches(str(value), pinned["hdk"]):
                add(
                    (variable,),
                    value,
                    f"stack {stack_name} (CANN {pinned['cann']}) works with Ascend HDK "
                    f"{', '.join(pinned['hdk'])}; install a driver of those lines, change provision_stack, "
                    "or set provision_allow_unlocked_versions: true to run an untested combination",
                )
        elif key == "firmware" and settings.ascend_driver_version not in (None, str(pinned["driver"])):
            # A driver of another HDK release comes with that release's firmware: npu-smi's board info
            # (Compatibility) judges the pair, the lock cannot.
            continue
        else:
            add(
                (variable,),
                value,
                f"stack {stack_name} pins {key} {pinned[key]}; change provision_stack, or set "
                "provision_allow_unlocked_versions: true to run an untested combination",
            )


def _check_open_engines(
    host: str, variables: Mapping[str, Any], report: _Report, scopes: Scopes | None
) -> None:
    """Served pools whose engines would listen beyond loopback without an API key, unless the inventory
    accepts it (``vllm_serve_allow_unauthenticated``); :mod:`provision.inventory.listen` decides. A templated
    key, opt-out or bind address is judged by the vllm_serve role once Ansible has templated it."""
    from ansible.module_utils.parsing.convert_bool import boolean

    from provision.inventory import listen

    pools = variables.get("npu_pools_list")
    served = (
        [p for p in pools if isinstance(p, Mapping) and p.get("profile")] if isinstance(pools, list) else []
    )
    key = variables.get("vllm_serve_api_key", "")
    allow = variables.get("vllm_serve_allow_unauthenticated", False)
    if not served or _templated(key) or _templated(allow) or (key is not None and str(key) != ""):
        return
    try:
        if boolean(plain(allow), strict=True):
            return
    except TypeError:  # not a boolean: the role's argument spec reports it
        return
    if "vllm_serve_bind_host" in variables:
        bind = variables["vllm_serve_bind_host"]
        if _templated(bind):
            return
        where, origin = listen.describe(bind), origin_of(bind)
    else:
        address = variables.get("ansible_host", host)
        if _templated(address):
            return
        bind = listen.management_address(plain(address))
        # Not the address itself: the same words for every host of a group make one problem, not one per host.
        where = (
            "the node's address (ansible_host, vllm_serve_bind_host's default)"
            if listen.ip_literal(plain(address))
            else "every address of the node (0.0.0.0, vllm_serve_bind_host's default where ansible_host "
            "is not an IP address)"
        )
        origin = origin_of(pools)
    problem = listen.engine_problem(plain(bind), False, False)
    if problem is None:
        return
    if "vllm_serve_api_key" in variables:
        origin = origin_of(key) or origin
    report.add(
        _scope_for(host, origin, scopes),
        "vllm_serve_api_key",
        plain(key) if "vllm_serve_api_key" in variables else _MISSING,
        listen.open_engine_problem(where),
        origin,
    )


def host_issues(host: str, variables: Mapping[str, Any]) -> list[str]:
    """The problems of one host's variables as plain messages (for the preflight role's filter).

    Values are checked as plain Python: inside a play Ansible hands the filter its own tagged or lazy types
    (ansible-core 2.19), which strict schema types would reject ("0: must be a whole number").
    """
    report = _Report()
    _check_host(host, plain(dict(variables)), report)
    return [
        f"{i.field}: {i.message}" if i.value is _MISSING else f"{i.field} = {_show(i.value)}: {i.message}"
        for i in report.issues()
    ]


def owned_variable_names(names: Iterable[str]) -> list[str]:
    """The names among ``names`` that provision owns (by prefix)."""
    prefixes, _ = _known_variables()
    return [n for n in names if n.startswith(prefixes) and not n.startswith("ansible_")]


def format_issues(issues: Iterable[Issue], base: Path | None = None) -> list[str]:
    return [issue.render(base) for issue in issues]


# ------------------------------------------------------------------------------------------ the resolved view


@dataclass(frozen=True, slots=True)
class ResolvedHost:
    """One host of ``npu_nodes`` as the commands read it once the inventory is valid: its variables as
    plain data (:func:`~provision.inventory.load.plain`) and the stack it runs
    (:func:`provision.ascend.lock.host_stack`)."""

    name: str
    variables: dict[str, Any]
    stack: lock.HostStack


@dataclass(frozen=True, slots=True)
class Resolved:
    """A valid inventory, resolved per host: what the converge engine and the CLI read instead of Ansible's
    host variables."""

    inventory: Inventory
    hosts: dict[str, ResolvedHost]
    """The hosts of ``npu_nodes``, in the group's order."""
    serving_groups: list[list[str]] | None
    """The multi-node serving groups (host names, head first); None when they cannot be worked out."""


def resolve(inventory: Inventory) -> Resolved:
    """The per-host view of an inventory :func:`check` passed."""
    hosts: dict[str, ResolvedHost] = {}
    for name in inventory.group_hosts(HOST_GROUP):
        variables: dict[str, Any] = plain(dict(inventory.hosts.get(name) or {}))
        hosts[name] = ResolvedHost(name, variables, lock.host_stack(variables))
    try:
        groups = serving_groups(inventory_view(list(hosts), {h: v.variables for h, v in hosts.items()}))
        members: list[list[str]] | None = [[m.host for m in group.members] for group in groups]
    except Exception:  # any doubt about the grouping: the callers treat every host as its own
        members = None
    return Resolved(inventory, hosts, members)

"""The roles' own type declarations (``roles/*/meta/argument_specs.yml``), applied to the inventory.

Ansible checks a role's variables against its argument spec when the role starts; a bad value then fails the
play on every node, after the roles before it have changed them. ``provision validate`` runs the very same
check (Ansible's ``ArgumentSpecValidator``, so the same coercion: INI's ``"false"`` is a bool, ``"8"`` an int)
on every inventory variable a role declares, before any host is touched. The pydantic schema
(:mod:`provision.inventory.schema`) adds ranges, formats and cross-field checks on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import yaml

from provision.inventory import rules
from provision.inventory.files import YAML_LOADER
from provision.inventory.load import plain
from provision.paths import ansible_root

Problem = tuple[tuple[str | int, ...], str]

# What a value of each Ansible type must be, in the words of provision's other messages.
_TYPE_WORDS = {
    "bool": "must be true or false",
    "int": "must be a whole number",
    "float": "must be a number",
    "str": "must be a string",
    "path": "must be a path (a string)",
    "dict": "must be a mapping",
    "list": "must be a list",
    "bytes": "must be a size such as 512M or 2G",
    "bits": "must be a size in bits such as 1Mb",
    "json": "must be JSON",
    "jsonarg": "must be JSON",
}


@cache
def role_options() -> dict[str, dict[str, Any]]:
    """Every option of every role's argument spec (all entry points): variable name -> its spec."""
    options: dict[str, dict[str, Any]] = {}
    for path in sorted((ansible_root() / "roles").glob("*/meta/argument_specs.yml")):
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=YAML_LOADER) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                options.setdefault(str(name), dict(spec))
    return options


_checked: dict[tuple[str, str], list[Problem]] = {}


def problems(name: str, value: Any) -> list[Problem]:
    """What Ansible's role argument validation says about ``name: value``: (path, message) pairs, none when
    the value passes or ``name`` is no role's option. A group variable is the same for all its hosts, so
    each distinct value is checked once."""
    spec = role_options().get(name)
    if spec is None:
        return []
    value = plain(value)
    key = (name, repr(value))
    if key not in _checked:
        found = _problems(name, spec, value)
        # Argument specs type numbers but bound none: the rules' ranges (finite, a port, a timeout) on top.
        _checked[key] = found or rules.limit_problems(name, value)
    return _checked[key]


def _one_of(choices: list[Any]) -> str:
    """``'a', 'b' or 'c'``, as the schema's messages list allowed values."""
    shown = [repr(choice) for choice in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


@cache
def _validator(name: str) -> Any:
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    return ArgumentSpecValidator({name: role_options()[name]})


def _problems(name: str, spec: Mapping[str, Any], value: Any) -> list[Problem]:
    from ansible.module_utils.errors import ArgumentTypeError, ArgumentValueError, ElementError

    validator = _validator(name)
    out: list[Problem] = []
    for error in validator.validate({name: value}).errors:
        if isinstance(error, ArgumentValueError) and spec.get("choices"):
            out.append(((name,), f"allowed: {_one_of(spec['choices'])}"))
        elif isinstance(error, ElementError):
            wanted = _TYPE_WORDS.get(str(spec.get("elements")), str(error))
            if not isinstance(value, list):  # Ansible made a one-item list of it
                out.append(((name,), f"must be a list (each item {wanted})"))
                continue
            for index, item in enumerate(value):
                if validator.validate({name: [item]}).error_messages:
                    out.append(((name, index), wanted))
        elif isinstance(error, ArgumentTypeError):
            out.append(_type_problem(name, spec, value, str(error)))
        else:
            out.append(((name,), str(error)))
    return list(dict.fromkeys(out))


def _type_problem(name: str, spec: Mapping[str, Any], value: Any, error: str) -> Problem:
    """A type error at the variable, or at the suboption it names (``... found in 'vllm_serve_bench_gate'``):
    Ansible says the suboption's type, not the variable's."""
    options = spec.get("options") or {}
    if isinstance(value, Mapping) and options:
        for key, sub in options.items():
            if key in value and f"'{key}'" in error:
                return (name, str(key)), _TYPE_WORDS.get(str(sub.get("type", "str")), error)
    return (name,), _TYPE_WORDS.get(str(spec.get("type", "str")), error)

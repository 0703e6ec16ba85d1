"""Which Ansible configuration a provision run uses: the user's where they have one, provision's as defaults.

Ansible reads ONE config file, the first of ``ANSIBLE_CONFIG``, ``./ansible.cfg``, ``~/.ansible.cfg`` and
``/etc/ansible/ansible.cfg`` (:func:`ansible.config.manager.find_ini_config_file`), and ``ANSIBLE_*``
environment variables over it. Without a file of the user's, a run reads provision's ansible.cfg. With one,
the run reads the user's file, and every setting of provision's file that the user's file does not set and
no ``ANSIBLE_*`` variable sets is passed as that setting's environment variable: the user's settings win,
provision's fill the rest. One setting provision refuses to run without: host key checking
(:data:`REQUIRED_ON`), since the nodes' host keys are what tells a node from an impostor holding its address.
"""

from __future__ import annotations

import configparser
import os
import warnings
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from provision import paths
from provision.errors import EnvironmentProblem

Setting = tuple[str, str]
"""An ini setting: (section, key)."""

REQUIRED_ON: dict[Setting, str] = {
    ("defaults", "host_key_checking"): (
        "provision runs with host key checking on (`provision bootstrap` records the nodes' host keys in the "
        "inventory's known_hosts)"
    ),
}
"""Settings provision refuses to run with turned off, and why."""

IMPORT_NOISE = ("DSA is deprecated", "ansible._internal._ssh._ssh_agent")
"""(message start, module) of a warning every Ansible start prints and no user can act on: cryptography 51
deprecates DSA, and ansible-core 2.19 (the last release for Python 3.11) imports its names at start. Only
that module's warning is hidden; a DSA key the user loads still warns."""


def quiet_import_noise() -> None:
    """Hide :data:`IMPORT_NOISE` in this process (provision imports Ansible to read inventories)."""
    message, module = IMPORT_NOISE
    warnings.filterwarnings("ignore", message=message, module=rf"{module.replace('.', '[.]')}\Z")


def python_warnings(environ: Mapping[str, str]) -> str:
    """``PYTHONWARNINGS`` of an Ansible run: the user's filters, then one hiding :data:`IMPORT_NOISE`."""
    message, module = IMPORT_NOISE
    ours = f"ignore:{message}:Warning:{module}"
    theirs = environ.get("PYTHONWARNINGS", "")
    return f"{theirs},{ours}" if theirs else ours


def _read(path: Path) -> dict[Setting, str]:
    """The (section, key) -> value of an ini file, as Ansible reads it (no interpolation)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(f"{path}: not an ansible.cfg Ansible can read: {exc}") from None
    return {(section, key): value for section in parser.sections() for key, value in parser.items(section)}


def provision_settings() -> dict[Setting, str]:
    """What provision's own ansible.cfg sets."""
    return _read(paths.ansible_cfg())


def user_config(environ: Mapping[str, str] | None = None) -> Path | None:
    """The config file Ansible would read for the user, unless it is provision's own (a run from the checkout,
    or ``ANSIBLE_CONFIG`` naming it)."""
    from ansible.config.manager import find_ini_config_file

    environ = os.environ if environ is None else environ
    saved = os.environ.get("ANSIBLE_CONFIG")
    try:
        # find_ini_config_file reads ANSIBLE_CONFIG from the process environment only.
        if "ANSIBLE_CONFIG" in environ:
            os.environ["ANSIBLE_CONFIG"] = environ["ANSIBLE_CONFIG"]
        else:
            os.environ.pop("ANSIBLE_CONFIG", None)
        found = find_ini_config_file()
    finally:
        if saved is None:
            os.environ.pop("ANSIBLE_CONFIG", None)
        else:
            os.environ["ANSIBLE_CONFIG"] = saved
    if not found:
        return None
    path = Path(found).resolve()
    return None if path == paths.ansible_cfg().resolve() else path


def start_collection_loader() -> None:
    """Ansible's collection loader in this process, once, with provision's collection first on its path as
    on a run's ``ANSIBLE_COLLECTIONS_PATH``: a plugin named by FQCN (``ansible.builtin.constructed``,
    ``provision.ascend.converged_state``) is found through it. ansible-playbook starts it; a library must."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:  # a second start only warns
        init_plugin_loader([str(paths.collections_path())])


def use_run_config() -> None:
    """Make Ansible in this process read the config file provision's runs read (provision's own when the
    user has none): what a run's tasks do in this process (:mod:`provision.runner.inprocess`) is then what
    they do under ansible-playbook. Ansible picks its file once, when it is first imported: call this before.
    A user's ``ANSIBLE_CONFIG`` or own file is what Ansible finds anyway, and is left to it."""
    import sys

    if "ansible.constants" in sys.modules or "ANSIBLE_CONFIG" in os.environ:
        return
    if user_config() is None:
        os.environ["ANSIBLE_CONFIG"] = str(paths.ansible_cfg())


@cache
def _definitions(ssh: bool = True) -> dict[Setting, tuple[frozenset[Setting], tuple[str, ...]]]:
    """Each ini setting Ansible knows -> (every ini spelling of that setting, its environment variables), from
    Ansible's own definitions: the base settings and, with ``ssh``, the ssh connection's ([ssh_connection];
    loading that plugin costs a few tenths of a second)."""
    from ansible import constants

    definitions = list(constants.config.get_configuration_definitions().values())
    if ssh:
        from ansible.plugins.loader import connection_loader

        connection_loader.get("ssh", class_only=True)  # registers the ssh plugin's settings
        definitions += constants.config.get_configuration_definitions("connection", "ssh").values()
    found: dict[Setting, tuple[frozenset[Setting], tuple[str, ...]]] = {}
    for definition in definitions:
        spellings = frozenset((ini["section"], ini["key"]) for ini in definition.get("ini") or ())
        names = tuple(env["name"] for env in definition.get("env") or ())
        for spelling in spellings:
            found.setdefault(spelling, (spellings, names))
    return found


def _false(value: str) -> bool:
    from ansible.module_utils.parsing.convert_bool import boolean

    try:
        return not boolean(value, strict=True)
    except TypeError:
        return False  # not a boolean: Ansible itself refuses it


def config_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a run needs for its configuration: ``ANSIBLE_CONFIG`` and provision's defaults the
    user's file and environment leave unset. Raises :class:`EnvironmentProblem` when the user's file or
    environment turns a :data:`REQUIRED_ON` setting off."""
    environ = os.environ if environ is None else environ
    user = user_config(environ)
    theirs = _read(user) if user is not None else {}
    definitions = _definitions(ssh=user is not None)
    for setting, why in REQUIRED_ON.items():
        spellings, names = definitions.get(setting, (frozenset({setting}), ()))
        for name in names:
            if name in environ and _false(environ[name]):
                raise EnvironmentProblem(f"{name}={environ[name]}: {why}; unset it")
        for spelling in sorted(spellings & theirs.keys()):
            if _false(theirs[spelling]):
                raise EnvironmentProblem(
                    f"{user}: [{spelling[0]}] {spelling[1]} = {theirs[spelling]}: {why}; remove it"
                )
    if user is None:
        return {"ANSIBLE_CONFIG": str(paths.ansible_cfg())}
    env = {"ANSIBLE_CONFIG": str(user)}
    for setting, value in provision_defaults(environ).items():
        _, names = definitions.get(setting, (frozenset({setting}), ()))
        if names:
            env[names[0]] = value
    return env


def provision_defaults(environ: Mapping[str, str] | None = None) -> dict[Setting, str]:
    """The settings of provision's ansible.cfg that the user's config file and ``ANSIBLE_*`` environment
    leave unset (every one of them when the user has no file): those provision's defaults decide."""
    environ = os.environ if environ is None else environ
    user = user_config(environ)
    theirs = _read(user) if user is not None else {}
    definitions = _definitions(ssh=user is not None)
    left: dict[Setting, str] = {}
    for setting, value in provision_settings().items():
        spellings, names = definitions.get(setting, (frozenset({setting}), ()))
        if spellings & theirs.keys() or any(name in environ for name in names):
            continue
        left[setting] = value
    return left


def user_sets(setting: Setting, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user's config file (not provision's) sets ``setting``."""
    user = user_config(environ)
    return user is not None and setting in _read(user)


def user_collections_path(environ: Mapping[str, str] | None = None) -> str | None:
    """The collections path the user set (environment first, then their config file), or None."""
    environ = os.environ if environ is None else environ
    if "ANSIBLE_COLLECTIONS_PATH" in environ:
        return environ["ANSIBLE_COLLECTIONS_PATH"]
    user = user_config(environ)
    if user is None:
        return None
    theirs = _read(user)
    for key in ("collections_path", "collections_paths"):
        if ("defaults", key) in theirs:
            return theirs[("defaults", key)]
    return None

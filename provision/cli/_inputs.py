"""The CLI's option values checked at the edge, before any host is touched: what ansible-playbook (or a probe)
could not use is an :class:`InputError` (exit 2) naming the option, the value and the file.

``-e/--extra-vars`` is read as ansible-playbook's ``load_extra_vars`` reads it (Ansible's own loader and
``parse_kv``); ``--limit`` is matched by Ansible's InventoryManager. Both are handed on with their ``@file``
paths made absolute: ansible-runner runs ansible-playbook in its own run directory, so a relative path
would be looked up there instead of where the user typed it.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from provision import paths
from provision.errors import InputError
from provision.inventory.load import Inventory, plain
from provision.inventory.vault import Vault
from provision.runner.options import AnsibleOptions

# Groups every inventory has: naming them says nothing about this one.
_IMPLICIT_GROUPS = {"all", "ungrouped"}


# ------------------------------------------------------------------------------------------ numbers


def seconds(value: float | None) -> float | None:
    """Typer callback for a duration: a finite number of seconds above 0 (usage error, exit 2, otherwise)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a number of seconds above 0, not {value:g}")
    return value


# ------------------------------------------------------------------------------------------ playbook


def playbook(name: str) -> Path:
    """``playbooks/<name>`` of the shipped Ansible content; InputError listing those there are."""
    path = paths.playbook(name)
    if not path.is_file():
        shipped = sorted(p.stem for p in (paths.ansible_root() / "playbooks").glob("*.yml"))
        raise InputError(f"--playbook {name}: no such playbook; there are: {', '.join(shipped)}")
    return path


# ------------------------------------------------------------------------------------------ extra vars


def extra_vars(values: Sequence[str], cwd: Path | None = None) -> list[str]:
    """Every ``-e`` checked, and as ansible-playbook must be given it: ``@file`` absolute (a relative one is
    read from ``cwd``, default the current directory); an empty one is dropped, as ansible-playbook does."""
    base = cwd or Path.cwd()
    out: list[str] = []
    for value in values:
        if not value:
            continue
        variables(value, base)  # InputError when ansible-playbook could not use it
        out.append(f"@{_vars_file(value, base)}" if value.startswith("@") else value)
    return out


def variables(value: str, cwd: Path | None = None) -> dict[str, Any] | None:
    """What one ``-e`` value sets, read as ansible-playbook reads it: ``@file`` (YAML or JSON), inline YAML or
    JSON (starting with ``{`` or ``[``), else ``key=value`` pairs (Ansible's ``parse_kv``: quotes, spaces).
    None for a vault-encrypted file: ansible-playbook decrypts it with the user's vault settings.
    """
    if value.startswith("@"):
        return _read_vars_file(value, _vars_file(value, cwd or Path.cwd()))
    if value[:1] in ("/", "."):
        raise InputError(f"{_shown(value)}: a file is given as @{value}")
    if value[:1] in ("{", "["):
        return _mapping(value, _loaded(value, value, None))
    from ansible.errors import AnsibleError
    from ansible.parsing.splitter import parse_kv

    try:
        pairs: dict[str, Any] = parse_kv(value)
    except AnsibleError as exc:
        raise InputError(f"{_shown(value)}: {_first_line(exc)}") from None
    loose = pairs.pop("_raw_params", None)
    if loose is not None:  # ansible-playbook would set a variable named _raw_params
        raise InputError(
            f"{_shown(value)}: {loose!r} is not key=value (YAML or JSON starts with {{ or [, a file with @)"
        )
    return plain(pairs)  # type: ignore[no-any-return]


def _vars_file(value: str, cwd: Path) -> Path:
    name = value[1:]
    if not name:
        raise InputError(f"{_shown(value)}: no file named after @")
    return Path(os.path.abspath(cwd / Path(name).expanduser()))  # absolute, without "..": shown in errors


def _read_vars_file(value: str, path: Path) -> dict[str, Any] | None:
    from ansible.parsing.vault import is_encrypted

    shown = _shown(value)
    if not path.exists():
        raise InputError(f"{shown}: no such file {path} (a relative path is read from the current directory)")
    if not path.is_file():
        raise InputError(f"{shown}: {path} is not a file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{shown}: cannot read {path}: {exc.strerror or exc}") from None
    if is_encrypted(data):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{shown}: {path}:{line}: not UTF-8 text") from None
    return _mapping(value, _loaded(value, text, path), path)


def _loaded(value: str, text: str, path: Path | None) -> Any:
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader

    try:
        return DataLoader().load(text, file_name=str(path) if path else None)
    except AnsibleError as exc:
        problem = _first_line(exc).removeprefix("YAML parsing failed: ")
        if path is None:  # one line typed by the user: the problem is enough
            raise InputError(f"{_shown(value)}: not valid YAML or JSON: {problem}") from None
        line = getattr(getattr(exc, "obj", None), "line_num", None)
        where = f"{path}:{line}" if line else str(path)
        raise InputError(f"{_shown(value)}: {where}: not valid YAML or JSON: {problem}") from None


def _mapping(value: str, data: Any, path: Path | None = None) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        kind = "nothing" if data is None else f"a {type(plain(data)).__name__}"
        where = f"{path} holds" if path else "it is"
        raise InputError(f"{_shown(value)}: not a mapping of variable names to values; {where} {kind}")
    return plain(data)  # type: ignore[no-any-return]


def _shown(value: str) -> str:
    text = value if len(value) <= 60 else f"{value[:57]}..."
    return f"-e {shlex.quote(text)}"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n")[0]


# ------------------------------------------------------------------------------------------ limit


def limit(pattern: str | None, inventory: Inventory, option: str = "--limit") -> str | None:
    """``--limit`` checked against the inventory with Ansible's pattern matching (``a:b``, ``g:!h``,
    ``g:&h``, ``node*``, ``~regex``, ``@file``): InputError when a part of it, or the whole, matches no host.
    Returned as ansible-playbook must be given it (``@file`` absolute); an empty one is no limit, as in
    Ansible.
    """
    if not pattern:
        return pattern
    from ansible.inventory.manager import split_host_pattern

    parts = [part for part in split_host_pattern(pattern) if part]
    given: list[str] = []
    patterns: list[str] = []
    for part in parts:
        if part.startswith("@"):
            path = _limit_file(part, option, pattern)
            given.append(f"@{path}")
            patterns += _limit_file_patterns(path, option, pattern)
        else:
            given.append(part)
            patterns.append(part)
    if not patterns:  # "," : Ansible reads no pattern, hence no limit
        return None
    try:
        unmatched = [p for p in patterns if not inventory.hosts_matching(p[1:] if p[0] in "!&" else p)]
        selected = inventory.hosts_matching(patterns) if not unmatched else []
    except ValueError as exc:
        raise InputError(f"{option} {pattern}: {exc}") from None
    groups = ", ".join(sorted(set(inventory.groups) - _IMPLICIT_GROUPS)) or "none"
    if unmatched:
        which = "" if unmatched == [pattern] else f" {', '.join(unmatched)}"
        verb = "match" if len(unmatched) > 1 else "matches"
        raise InputError(
            f"{option} {pattern}:{which} {verb} no host or group of {inventory.source} "
            f"(groups: {groups}; {len(inventory.hosts)} host(s))"
        )
    if not selected:
        raise InputError(f"{option} {pattern}: leaves no host of {inventory.source} (groups: {groups})")
    return ",".join(given) if given != parts else pattern


def _limit_file(part: str, option: str, pattern: str) -> Path:
    path = Path(os.path.abspath(Path(part[1:]).expanduser()))
    if not path.is_file():
        what = f"{path} is not a file" if path.exists() else f"no such file {path}"
        raise InputError(f"{option} {pattern}: {what} (a relative path is read from the current directory)")
    return path


def _limit_file_patterns(path: Path, option: str, pattern: str) -> list[str]:
    """A limit file's patterns, one a line, as Ansible's ``InventoryManager.subset`` reads them."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(f"{option} {pattern}: cannot read {path}: {reason}") from None
    found = [line.strip() for line in text.split("\n") if line.strip()]
    if not found:  # an empty retry file: nothing to run on, not everything
        raise InputError(f"{option} {pattern}: {path} names no host")
    return found


# ------------------------------------------------------------------------------------------ engine


def engine(value: str | None) -> str | None:
    """Typer callback for ``--engine``: the address the image commands will use (``--engine``, else
    ``$PROVISION_DOCKER_HOST``, else ``$DOCKER_HOST``) must be one the Docker SDK can parse."""
    import docker.errors
    from docker.utils import parse_host

    from provision.image.engine import ENGINE_ENV, engine_url

    address = engine_url(value)
    if not address:
        return value
    source = f"--engine/${ENGINE_ENV}" if value else "$DOCKER_HOST"
    try:
        parse_host(address)
    except (ValueError, docker.errors.DockerException) as exc:
        raise InputError(f"{source} {address}: not an engine address: {exc}") from None
    return value


# ------------------------------------------------------------------------------------------ API key

OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
"""What ``vllm bench serve`` sends as its bearer key (``vllm/benchmarks/lib/endpoint_request_func.py``)."""

API_KEY_ON_ARGV = (
    "warning: --api-key puts the key on the command line, which every user of this machine can read "
    "(ps, /proc/PID/cmdline); give --api-key-file FILE or $PROVISION_API_KEY instead"
)
_KEY_ON_ARGV = "provision.api_key_on_argv"
_KEY_FILE_GIVEN = "provision.api_key_file_given"


def api_key_option(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Typer callback of ``--api-key``: a key typed on the command line is taken, with a warning."""
    source = ctx.get_parameter_source(str(param.name))
    if value and source is not None and source.name == "COMMANDLINE":
        ctx.meta[_KEY_ON_ARGV] = True
        _one_key(ctx)
        typer.echo(API_KEY_ON_ARGV, err=True)
    return value


def api_key_file_option(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Typer callback of ``--api-key-file`` (read by :func:`api_key`)."""
    if value is not None:
        ctx.meta[_KEY_FILE_GIVEN] = True
        _one_key(ctx)
    return value


def _one_key(ctx: typer.Context) -> None:
    # Either callback may run first (click runs those of the command line in their order, then the rest).
    if ctx.meta.get(_KEY_ON_ARGV) and ctx.meta.get(_KEY_FILE_GIVEN):
        raise InputError("--api-key and --api-key-file: give one of them")


def api_key(given: str | None, file: Path | None, *, url: bool) -> str | None:
    """The bearer key of a command with ``--api-key`` (callback :func:`api_key_option`) and
    ``--api-key-file`` (:func:`api_key_file_option`): the file's first line, else ``--api-key`` /
    ``$PROVISION_API_KEY``, else, for URLs, ``$OPENAI_API_KEY`` as ``vllm bench serve`` reads it (an
    inventory's instances have their own key, ``vllm_serve_api_key``)."""
    if file is not None:
        return secret_file("--api-key-file", file)
    if given:
        return given
    return (os.environ.get(OPENAI_API_KEY_ENV) or None) if url else None


def secret_file(option: str, path: Path) -> str:
    """The first line of ``path`` without surrounding blanks (a trailing newline is not part of a secret);
    InputError naming ``option`` and ``path`` when it is missing, unreadable or empty."""
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{option} {path}: is a folder, not a file") from None
    except UnicodeDecodeError:
        raise InputError(f"{option} {path}: cannot read it: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{option} {path}: cannot read it: {exc.strerror or exc}") from None
    value = text.split("\n", 1)[0].strip()
    if not value:
        raise InputError(f"{option} {path}: is empty (the key is its first line)")
    return value


# ------------------------------------------------------------------------------------------ inventory


def inventories(positional: Path | None, given: Sequence[Path]) -> list[Path]:
    """The inventory sources of a command: INVENTORY, then every ``-i``, as ansible-playbook reads several;
    none given, Ansible's own setting (``ANSIBLE_INVENTORY``, else ``[defaults] inventory`` of the user's
    ansible.cfg), as ansible-playbook would read it without ``-i``."""
    sources = ([positional] if positional is not None else []) + list(given)
    if not sources:
        sources = configured_inventory()
    if not sources:
        raise InputError(
            "no inventory given: name one (INVENTORY, or -i INVENTORY as ansible-playbook takes it), or set "
            "ANSIBLE_INVENTORY or [defaults] inventory in your ansible.cfg"
        )
    return list(dict.fromkeys(sources))


def configured_inventory(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The inventory Ansible's configuration names (``ANSIBLE_INVENTORY``, then ``[defaults] inventory`` of
    the user's ansible.cfg, relative paths from that file's folder); empty when neither sets one
    (ansible-playbook's fallback ``/etc/ansible/hosts`` is not taken for a provision run)."""
    from ansible.config.manager import ConfigManager

    from provision.ansible_config import user_config

    environ = os.environ if environ is None else environ
    listed = environ.get("ANSIBLE_INVENTORY", "")
    if listed.strip():
        return [Path(p).expanduser() for p in listed.split(",") if p.strip()]
    config = user_config(environ)
    if config is None:
        return []
    try:
        value, origin = ConfigManager(conf_file=str(config)).get_config_value_and_origin("DEFAULT_HOST_LIST")
    except Exception as exc:  # Ansible's own reading of the file: its message names the problem
        raise InputError(f"{config}: [defaults] inventory: {exc}") from None
    if origin != str(config):
        return []
    return [Path(p) for p in value or []]


# ------------------------------------------------------------------------------------------ ansible options


def ansible_options(
    *,
    user: str | None = None,
    connection: str | None = None,
    timeout: int | None = None,
    become_user: str | None = None,
    list_hosts: bool = False,
    list_tasks: bool = False,
    start_at_task: str | None = None,
    private_key: Path | None = None,
    ssh_common_args: str | None = None,
    become: bool = False,
    ask_pass: bool = False,
    ask_become_pass: bool = False,
    connection_password_file: Path | None = None,
    become_password_file: Path | None = None,
    vault_ids: Sequence[str] = (),
    vault_password_files: Sequence[Path] = (),
    ask_vault_pass: bool = False,
) -> AnsibleOptions:
    """ansible-playbook's connection, become and vault options, checked: a file that is not there, or a
    prompt with no terminal to ask on, is an InputError (exit 2) before any host is touched. The passwords
    of ``-k``/``-K`` are asked for by :func:`ask_passwords`, once the inventory is known to be good."""
    for option, path in (
        ("--private-key", private_key),
        ("--connection-password-file", connection_password_file),
        ("--become-password-file", become_password_file),
        *(("--vault-password-file", p) for p in vault_password_files),
    ):
        if path is not None and not Path(path).expanduser().is_file():
            raise InputError(f"{option} {path}: no such file")
    for option, asked, instead in (
        ("-k/--ask-pass", ask_pass, "--connection-password-file FILE"),
        ("-K/--ask-become-pass", ask_become_pass, "--become-password-file FILE"),
    ):
        if asked and not _terminal():
            raise InputError(
                f"{option}: cannot ask for the password, stdin is not a terminal; give {instead}"
            )
    if connection is not None:
        _connection_plugin(connection)
    options = AnsibleOptions(
        user=user or None,
        connection=connection or None,
        timeout=timeout,
        become_user=become_user or None,
        list_hosts=list_hosts,
        list_tasks=list_tasks,
        start_at_task=start_at_task or None,
        private_key=private_key,
        ssh_common_args=ssh_common_args or None,
        become=become,
        vault=Vault(tuple(vault_ids), tuple(str(p) for p in vault_password_files), ask_vault_pass),
        connection_password_file=connection_password_file,
        become_password_file=become_password_file,
        ask_pass=ask_pass,
        ask_become_pass=ask_become_pass,
    )
    if options.vault.prompts() and not _terminal():
        options.vault.secrets()  # the error that says why it cannot ask, before anything else
    return options


_PLUGIN_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*){0,2}$")


def _connection_plugin(name: str) -> None:
    """``-c NAME``: ansible-core's own connection plugins by short name (``ssh``, ``local``,
    ``paramiko_ssh`` ...), else a collection's by its FQCN (``namespace.collection.name``), which Ansible
    looks up when it runs; anything else is an InputError naming the built-in ones."""
    import pkgutil

    import ansible.plugins.connection as builtin

    known = sorted(m.name for m in pkgutil.iter_modules(builtin.__path__) if not m.name.startswith("_"))
    if name in known or (_PLUGIN_NAME.match(name) and name.count(".") == 2):
        return
    raise InputError(
        f"-c/--connection {name}: no such connection plugin; ansible-core's are: {', '.join(known)} "
        "(a collection's is named namespace.collection.name)"
    )


def ask_passwords(options: AnsibleOptions) -> AnsibleOptions:
    """The passwords ``-k`` and ``-K`` ask for, with ansible-playbook's prompts (an empty become password
    after ``-k`` is the SSH password, as there)."""
    from ansible.cli import CLI

    try:
        if options.ask_pass and options.connection_password is None:
            options.connection_password = CLI._get_secret("SSH password: ")
        if options.ask_become_pass and options.become_password is None:
            prompt = (
                "BECOME password[defaults to SSH password]: " if options.ask_pass else "BECOME password: "
            )
            typed = CLI._get_secret(prompt)
            options.become_password = options.connection_password if options.ask_pass and not typed else typed
    except EOFError:
        raise InputError("no password was typed") from None
    return options


def _terminal() -> bool:
    return sys.stdin.isatty()

"""``provision bootstrap HOST...``: first contact with new servers, up to an inventory entry.

Checks each host key before anything is sent, logs in with a password (prompt, file or environment; never
the command line) or an initial key, creates the deploy user with its key and passwordless sudo, installs
python3 if missing, optionally hardens sshd once the deploy key is proven, discovers the hardware and
writes the inventory. See docs/bootstrap.md.
"""

from __future__ import annotations

import getpass
import json
import re
import sys
from pathlib import Path
from typing import Any

import typer

from provision.bootstrap.credentials import (
    PasswordSource,
    Secret,
    ensure_deploy_key,
    load_private_key,
    password_from_env,
    password_from_file,
)
from provision.bootstrap.hostkeys import KnownHosts, TrustPolicy, parse_pins
from provision.bootstrap.node import HostResult, Options
from provision.bootstrap.run import (
    InventoryUpdate,
    LineDisplay,
    LiveDisplay,
    bootstrap_all,
    check_inventory_path,
    read_hosts_file,
    resolve_targets,
    result_table,
    write_inventory,
)
from provision.cli import _inputs
from provision.cli.console import Console
from provision.errors import InputError

_DEPLOY_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
DEFAULT_DEPLOY_KEY = Path("~/.ssh/provision_deploy_ed25519")


def bootstrap(
    hosts: list[str] = typer.Argument(
        None, help="Hosts: [NAME=][USER@]ADDRESS[:PORT]; a name already in the inventory is enough."
    ),
    from_file: Path | None = typer.Option(None, "--from", help="Read hosts from a file, one per line."),
    inventory: Path = typer.Option(
        ..., "--inventory", "-i", envvar="PROVISION_INVENTORY", help="INI inventory to add the hosts to."
    ),
    user: str = typer.Option("root", "--user", "-u", help="User for the first login (root or a sudo user)."),
    password_file: Path | None = typer.Option(
        None, "--password-file", help="Read the login (and sudo) password from this file's first line."
    ),
    password_env: str | None = typer.Option(
        None, "--password-env", help="Read the login (and sudo) password from this environment variable."
    ),
    key: Path | None = typer.Option(
        None, "--key", help="Private key for the first login (e.g. the vendor's)."
    ),
    deploy_user: str = typer.Option(
        "provision", "--deploy-user", envvar="PROVISION_DEPLOY_USER", help="User Ansible logs in as."
    ),
    deploy_key: Path = typer.Option(
        DEFAULT_DEPLOY_KEY,
        "--deploy-key",
        envvar="PROVISION_DEPLOY_KEY",
        help="The deploy user's private key; an ed25519 pair is generated there if missing.",
    ),
    known_hosts: Path | None = typer.Option(
        None,
        "--known-hosts",
        help="known_hosts file to record host keys in, used by later runs [default: beside the inventory].",
    ),
    host_key: list[str] = typer.Option(
        [], "--host-key", help="Expected host key: [HOST=]SHA256:... (repeatable)."
    ),
    trust_known_hosts: list[Path] = typer.Option(
        [], "--trust-known-hosts", help="Trust host keys listed in this known_hosts file (repeatable)."
    ),
    trust_on_first_use: bool = typer.Option(
        False, "--trust-on-first-use", help="Accept and record unknown host keys (never a changed one)."
    ),
    harden: bool = typer.Option(
        False, "--harden", help="Then disable root and password login in sshd (after the deploy key works)."
    ),
    port: int = typer.Option(22, "--port", min=1, max=65535, help="SSH port when a host does not give one."),
    parallel: int = typer.Option(16, "--parallel", envvar="PROVISION_PARALLEL", min=1, help="Hosts at once."),
    timeout: float = typer.Option(
        15.0, "--timeout", callback=_inputs.seconds, help="Seconds to wait for a host to answer."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print a machine-readable summary on stdout; progress and the table to stderr."
    ),
) -> None:
    """Make new servers manageable and add them to the inventory.

    Exit code 0: every host ok; 1: a host failed; 2: bad input (no host contacted).
    """
    out = Console.for_stream(sys.stderr if as_json else sys.stdout)
    specs = list(hosts or [])
    if from_file is not None:
        specs += read_hosts_file(from_file)
    if not _DEPLOY_USER.match(deploy_user) or deploy_user == "root":
        raise InputError(f"--deploy-user {deploy_user!r}: a user name other than root (a-z, 0-9, _ and -)")
    if password_file is not None and password_env is not None:
        raise InputError("give --password-file or --password-env, not both")
    member_of = check_inventory_path(inventory)
    targets = resolve_targets(specs, inventory, port)
    record_path = (known_hosts or inventory.parent / "known_hosts").absolute()
    if any(c.isspace() for c in str(record_path)):
        raise InputError(f"--known-hosts {record_path}: the path must not contain spaces (ssh reads it)")
    if record_path.exists() and not record_path.is_file():
        raise InputError(f"--known-hosts {record_path}: not a file")
    pins, anywhere = parse_pins(host_key)
    unknown_pins = sorted(set(pins) - {t.name for t in targets} - {t.address for t in targets})
    if unknown_pins:
        raise InputError(f"--host-key for {', '.join(unknown_pins)}: not among the hosts to bootstrap")
    for path in trust_known_hosts:
        if not path.expanduser().is_file():
            raise InputError(f"--trust-known-hosts {path}: no such file")
    secret: Secret | None = None
    if password_file is not None:
        secret = password_from_file(password_file)
    elif password_env is not None:
        secret = password_from_env(password_env)
    login_key = load_private_key(key.expanduser(), "--key") if key is not None else None
    try:
        deploy = ensure_deploy_key(deploy_key, f"{deploy_user}@provision")
    except OSError as exc:  # its folder cannot be made, or the key cannot be written there
        where = f" ({exc.filename})" if exc.filename else ""
        reason = exc.strerror or str(exc)
        raise InputError(f"--deploy-key {deploy_key}: cannot create it: {reason}{where}") from None
    policy = TrustPolicy(
        record=KnownHosts(record_path),
        trusted=[KnownHosts(p.expanduser()) for p in trust_known_hosts],
        pins=pins,
        pinned_anywhere=anywhere,
        trust_on_first_use=trust_on_first_use,
    )
    display: LiveDisplay | LineDisplay = (
        LiveDisplay(out.rich, [t.name for t in targets]) if out.interactive else LineDisplay(out.stream)
    )

    def prompt() -> str:
        with display.paused():
            return getpass.getpass(f"Password for {user} (used for hosts the deploy key cannot reach yet): ")

    interactive_stdin = sys.stdin.isatty() and out.interactive
    password = PasswordSource(secret, prompt if secret is None and interactive_stdin else None)
    options = Options(
        policy=policy,
        deploy_user=deploy_user,
        deploy_key=deploy,
        login_user=user,
        login_key=login_key,
        password=password,
        harden=harden,
        timeout=timeout,
    )
    if deploy.created:
        out.line(f"generated the deploy key {deploy.path} (public half: {deploy.path}.pub)")
    out.status(f"bootstrap: {len(targets)} host(s); host keys recorded in {record_path}")
    with display:
        results = bootstrap_all(targets, options, display, parallel=parallel)
    update = write_inventory(inventory, results, options, member_of)
    out.rich.print(result_table(results, update.changes, ascii_only=not out.interactive))
    for result in results:
        if result.error is not None:
            out.line(f"FAILED {result.target.name} ({result.error.kind}):")
            for line in str(result.error).splitlines():
                out.line(f"    {line}")
    failed = [r.target.name for r in results if not r.ok]
    changed = [r.target.name for r in results if r.ok and (r.changes or update.changes.get(r.target.name))]
    unchanged = len(results) - len(failed) - len(changed)
    if update.problems:
        out.line(f"{inventory}: written, but `provision validate` reports:")
        for problem in update.problems:
            out.line(f"  {problem}")
    if update.refused:
        out.line(f"{inventory}: what the nodes reported that was not written:")
        for refused in update.refused:
            out.line(f"  {refused}")
    out.line(
        f"{len(results)} host(s): {len(changed)} changed, {unchanged} unchanged, {len(failed)} failed"
        f"{' (' + ', '.join(failed) + ')' if failed else ''}; inventory: {inventory}"
    )
    if as_json:
        typer.echo(json.dumps(_summary(results, update, inventory, record_path), indent=2))
    if failed or update.problems or update.refused:
        raise typer.Exit(1)


def _summary(
    results: list[HostResult], update: InventoryUpdate, inventory: Path, known_hosts: Path
) -> dict[str, Any]:
    """``bootstrap --json``: per host what happened, then what the inventory got (docs/bootstrap.md)."""
    hosts = []
    for r in results:
        error = None if r.error is None else {"kind": r.error.kind, "message": str(r.error)}
        changes = [*r.changes, *update.changes.get(r.target.name, [])]
        state = "failed" if not r.ok else ("changed" if changes else "unchanged")
        hosts.append(
            {"name": r.target.name, "address": r.target.address, "port": r.target.port, "result": state,
             "fingerprint": r.fingerprint, "trusted_by": r.trusted_by, "login": r.login, "changes": r.changes,
             "inventory_changes": update.changes.get(r.target.name, []), "error": error,
             "seconds": round(r.seconds, 2)}
        )  # fmt: skip
    ok = all(r.ok for r in results) and not update.problems and not update.refused
    return {
        "ok": ok, "inventory": str(inventory), "known_hosts": str(known_hosts), "hosts": hosts,
        "failed": [r.target.name for r in results if not r.ok], "problems": update.problems,
        "refused": update.refused,
    }  # fmt: skip


def register(app: typer.Typer) -> None:
    app.command("bootstrap")(bootstrap)

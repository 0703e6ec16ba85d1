"""What apply and plan share: validate first, run a playbook with live progress, report, exit code."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import typer

from provision.cli import _inputs
from provision.cli.console import Console
from provision.errors import InputError
from provision.inventory.validate import VALIDATED_VARS, Resolved, check, checked_in_full, resolve
from provision.paths import shadowed_collections
from provision.runner.events import Observer
from provision.runner.options import AnsibleOptions
from provision.runner.progress import HEARTBEAT_S, LineProgress, LiveProgress, recap_table
from provision.runner.run import RunResult, run_playbook, user_collections
from provision.serving.health import serves_api

InventoryArg = typer.Argument(
    None,
    help="Ansible inventory (INI or YAML file, folder, executable script, plugin config) with "
    "group_vars/host_vars; or give it with -i.",
    show_default=False,
)
InventoriesOpt = typer.Option(
    [], "--inventory", "-i", help="Inventory source, as ansible-playbook -i (repeatable; beside INVENTORY)."
)
LimitOpt = typer.Option(None, "--limit", "-l", help="Only these hosts/groups (Ansible pattern).")
TagsOpt = typer.Option(None, "--tags", "-t", help="Only tasks with these tags (comma list).")
SkipTagsOpt = typer.Option(None, "--skip-tags", help="Skip tasks with these tags.")
ExtraVarsOpt = typer.Option(
    [], "--extra-vars", "-e", help="Extra variables: key=value, JSON, or @file (repeatable)."
)
ForksOpt = typer.Option(None, "--forks", "-f", envvar="PROVISION_FORKS", min=1, help="Parallel hosts.")
JsonOpt = typer.Option(
    False, "--json", help="Print a machine-readable summary on stdout; progress to stderr."
)
VerboseOpt = typer.Option(0, "--verbose", "-v", count=True, help="Ansible verbosity (-v ... -vvvv).")


@dataclass(frozen=True, slots=True)
class PlaybookRun:
    """One run of a playbook as the CLI asked for it, its inputs checked."""

    verb: str
    """The command (``apply``, ``plan``): names the run directory."""
    playbook: str
    tags: str | None
    skip_tags: str | None
    extra_vars: list[str]
    """As ansible-playbook is given them (``@file`` absolute)."""
    given_extra_vars: list[str]
    """As the user typed them."""
    check: bool
    diff: bool
    forks: int | None
    verbosity: int
    limit: str | None
    options: AnsibleOptions
    validated: bool = False
    """Every variable the playbook reads was checked before any host was contacted: the inventory in full
    (:func:`~provision.inventory.validate.checked_in_full`) and no ``-e``; the playbooks are told so."""

    @property
    def playbook_extra_vars(self) -> list[str]:
        """What ansible-playbook is given: the user's ``-e``, or the word that the checks were made."""
        return [*self.extra_vars, VALIDATED_VARS] if self.validated else self.extra_vars


class Runs(Protocol):
    """How a verb runs its playbook once the inputs are checked (:func:`plainly`, or apply's own)."""

    def __call__(
        self, run: PlaybookRun, inventory: Resolved, sources: list[Path], observer: Observer
    ) -> RunResult: ...


def plainly(run: PlaybookRun, inventory: Resolved, sources: list[Path], observer: Observer) -> RunResult:
    """The playbook, once, on every host it names."""
    return run_playbook(
        run.playbook,
        sources,
        verb=run.verb,
        limit=run.limit,
        tags=run.tags,
        skip_tags=run.skip_tags,
        extra_vars=run.playbook_extra_vars,
        check=run.check,
        diff=run.diff,
        forks=run.forks,
        verbosity=run.verbosity,
        observer=observer,
        options=run.options,
    )


def run_and_report(
    playbook: str,
    inventory: list[Path],
    *,
    verb: str,
    limit: str | None,
    tags: str | None,
    skip_tags: str | None,
    extra_vars: list[str],
    check_mode: bool,
    diff: bool,
    forks: int | None,
    as_json: bool,
    verbosity: int = 0,
    options: AnsibleOptions | None = None,
    runs: Runs | None = None,
) -> RunResult:
    """Validate the inventory and the options (exit 2 on bad input, no host touched), run (``runs``: the
    verb's way, default :func:`plainly`), show progress and recap; exit on failure."""
    _inputs.playbook(playbook)
    options = options or AnsibleOptions()
    given_vars, extra_vars = extra_vars, _inputs.extra_vars(extra_vars)
    loaded = check(inventory, options.vault)
    limit = _inputs.limit(limit, loaded)
    _inputs.ask_passwords(options)
    shown = ", ".join(map(str, inventory))
    out = Console.for_stream(sys.stderr if as_json else sys.stdout)
    if not as_json:
        out.status(
            f"{verb}: {playbook} on {shown}{' (check mode: nothing is changed)' if check_mode else ''}"
        )
    for warning in shadowed_collections(user_collections()):
        Console.for_stream(sys.stderr).line(f"warning: {warning}")
    verbose = verbosity > 0
    display: LiveProgress | LineProgress = (
        LiveProgress(out.rich, verbose=verbose)
        if out.interactive
        else LineProgress(out.stream, verbose=verbose, heartbeat_s=_heartbeat_s())
    )
    run = PlaybookRun(
        verb,
        playbook,
        tags,
        skip_tags,
        extra_vars,
        given_vars,
        check_mode,
        diff,
        forks,
        verbosity,
        limit,
        options,
        validated=not given_vars and checked_in_full(loaded),
    )
    with display:
        result = (runs or plainly)(run, resolve(loaded), inventory, display)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    elif result.listing:  # --list-hosts/--list-tasks: ansible-playbook's own listing, nothing ran
        out.line(result.listing)
    else:
        report(result, out, inventory[0])
    return result


def _heartbeat_s() -> float:
    """``PROVISION_HEARTBEAT_S`` (seconds; 0: no heartbeat), else :data:`HEARTBEAT_S`."""
    given = os.environ.get("PROVISION_HEARTBEAT_S", "").strip()
    if not given:
        return HEARTBEAT_S
    try:
        value = float(given)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"PROVISION_HEARTBEAT_S={given}: a number of seconds, 0 or more (0: no heartbeat)")
    return value


def report(result: RunResult, out: Console, inventory: Path | None = None) -> None:
    if result.hosts:
        out.rich.print(recap_table(result, ascii_only=not out.interactive))
    for failure in result.failures:
        what = "UNREACHABLE" if failure.unreachable else "FAILED"
        out.line(f"{what} {failure.host}: {failure.task}")
        for line in failure.message.splitlines():
            out.line(f"    {line}")
    records(result, out)
    if result.endpoints and not result.check:
        endpoints(result, out, inventory)
    failed_hosts = sorted(h for h, s in result.hosts.items() if not s.healthy)
    parts = [f"failed: {', '.join(result.failed)}"] if result.failed else []
    parts += [f"unreachable: {', '.join(result.unreachable)}"] if result.unreachable else []
    verdict = "ok" if result.ok else "; ".join(parts) or "failed"
    verdict += f" (exit {result.exit_code})" if result.exit_code else ""
    out.line(f"{verdict}; run directory: {result.run_dir}")
    if failed_hosts and inventory is not None:
        # doctor names the known causes (a node down, DKMS residue, a full disk...) and their fixes
        doctor = f"provision doctor {shlex.quote(str(inventory))} --limit {','.join(failed_hosts)}"
        out.line(f"what is wrong there and how to fix it: {doctor}")


def records(result: RunResult, out: Console) -> None:
    """Which nodes were verified against their record, which ran site.yml and why, which were recorded."""
    if result.verified:
        out.line(f"verified, as their last apply left them ({len(result.verified)}):")
        for host, detail in sorted(result.verified.items()):
            out.line(f"  {host}  {detail}")
    converged = result.converged
    if converged:
        out.line(f"converged with site.yml ({len(converged)}):")
        for host in converged:
            reasons = result.drift[host]
            out.line(f"  {host}  {reasons[0]}" + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""))
    unreachable = result.unreachable
    if unreachable:
        out.line(f"unreachable, not reached ({len(unreachable)}):")
        for host, reason in unreachable.items():
            out.line(f"  {host}  {reason.splitlines()[0] if reason else 'no message'}")
    if result.recorded:
        out.line(f"recorded: {', '.join(result.recorded)}")
    for failure in result.record_failures:
        out.line(f"record not written (the next apply converges it in full): {failure}")


def endpoints(result: RunResult, out: Console, inventory: Path | None = None) -> None:
    """The serving instances the health gate saw, and how to query one."""
    out.line("endpoints:")
    for item in result.endpoints:
        if not serves_api(item.role):  # headless: its head is the endpoint
            continue
        model = f"  model {item.model}" if item.model else ""
        group = f"  (serving group: {', '.join(item.hosts)})" if item.role == "head" and item.hosts else ""
        out.line(f"  {item.host}/{item.pool}  {item.state:<11} {item.url}{model}{group}")
    ready = next((item for item in result.endpoints if item.ready and serves_api(item.role)), None)
    if ready is None:
        return
    auth = ' -H "Authorization: Bearer $VLLM_API_KEY"' if ready.api_key else ""
    body = json.dumps({"model": ready.model, "prompt": "The capital of France is", "max_tokens": 16})
    out.line("query one:")
    out.line(f"  curl -s {ready.url}/v1/completions -H 'Content-Type: application/json'{auth} -d '{body}'")
    if ready.api_key:
        from provision.serving.apikey import key_files, shell_read

        written = key_files(inventory) if inventory is not None else []
        if len(written) == 1:  # written by `provision serve key`: how to read it, never the key itself
            out.line(f"  (export VLLM_API_KEY=$({shell_read(written[0])}))")
        else:
            out.line("  (VLLM_API_KEY: the inventory's vllm_serve_api_key)")
    out.line(f"  provision serve status {inventory or 'INVENTORY'}    # the health gate on every instance")


def finish(result: RunResult) -> None:
    if result.exit_code:
        raise typer.Exit(result.exit_code)

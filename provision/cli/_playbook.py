"""What apply and plan share: validate first, run a playbook with live progress, report, exit code."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path

import typer

from provision.cli import _inputs
from provision.cli.console import Console
from provision.inventory.validate import check
from provision.runner.converge import converge, fast_path_refusal
from provision.runner.options import AnsibleOptions
from provision.runner.progress import LineProgress, LiveProgress, recap_table
from provision.runner.run import RunResult, run_playbook
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
# ansible-playbook's connection, become and vault options, with its meanings.
UserOpt = typer.Option(None, "--user", "-u", help="Connect as this user (the inventory's ansible_user wins).")
PrivateKeyOpt = typer.Option(None, "--private-key", "--key-file", help="SSH private key file.")
SshCommonArgsOpt = typer.Option(None, "--ssh-common-args", help="Extra arguments for ssh, sftp and scp.")
AskPassOpt = typer.Option(False, "--ask-pass", "-k", help="Ask for the SSH password.")
ConnectionPasswordFileOpt = typer.Option(
    None, "--connection-password-file", "--conn-pass-file", help="File holding the SSH password."
)
BecomeOpt = typer.Option(False, "--become", "-b", help="Run tasks with become (sudo).")
AskBecomePassOpt = typer.Option(False, "--ask-become-pass", "-K", help="Ask for the become password.")
BecomePasswordFileOpt = typer.Option(
    None, "--become-password-file", "--become-pass-file", help="File holding the become password."
)
VaultIdOpt = typer.Option(
    [], "--vault-id", help="Vault identity [LABEL@]FILE, LABEL@SCRIPT or LABEL@prompt (repeatable)."
)
VaultPasswordFileOpt = typer.Option(
    [], "--vault-password-file", "--vault-pass-file", help="Vault password file (repeatable)."
)
AskVaultPassOpt = typer.Option(False, "--ask-vault-pass", "-J", help="Ask for the vault password.")
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
    full: bool = False,
    options: AnsibleOptions | None = None,
) -> RunResult:
    """Validate the inventory and the options (exit 2 on bad input, no host touched), run, show progress and
    recap; exit on failure.

    An apply of all of site.yml (:func:`fast_path_refusal` names no reason against it) goes through
    :func:`provision.runner.converge.converge`: nodes still as their record says are verified, not converged
    again (unless ``full``), and the nodes it converges are recorded.
    """
    _inputs.playbook(playbook)
    options = options or AnsibleOptions()
    given_vars, extra_vars = extra_vars, _inputs.extra_vars(extra_vars)
    loaded = check(inventory, options.vault)
    limit = _inputs.limit(limit, loaded)
    _inputs.ask_passwords(options)
    shown = ", ".join(map(str, inventory))
    refusal = fast_path_refusal(
        playbook, tags=tags, skip_tags=skip_tags, extra_vars=given_vars, check=check_mode
    )
    keep_records = (
        refusal is None
    )  # site.yml on every node it names: verify first unless --full, record after
    out = Console.for_stream(sys.stderr if as_json else sys.stdout)
    if not as_json:
        out.status(
            f"{verb}: {playbook} on {shown}{' (check mode: nothing is changed)' if check_mode else ''}"
        )
    display: LiveProgress | LineProgress = (
        LiveProgress(out.rich) if out.interactive else LineProgress(out.stream)
    )
    with display:
        if keep_records and verb == "apply":
            with tempfile.TemporaryDirectory(prefix="provision-apply-") as scratch:
                result = converge(
                    loaded, inventory, scratch=Path(scratch), limit=limit, forks=forks, verbosity=verbosity,
                    observer=display, full=full, diff=diff, options=options,
                )  # fmt: skip
        else:
            result = run_playbook(
                playbook,
                inventory,
                verb=verb,
                limit=limit,
                tags=tags,
                skip_tags=skip_tags,
                extra_vars=extra_vars,
                check=check_mode,
                diff=diff,
                forks=forks,
                verbosity=verbosity,
                observer=display,
                options=options,
            )
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        report(result, out, inventory[0])
    return result


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
    verdict = "ok" if result.ok else "failed"
    failed_hosts = sorted(h for h, s in result.hosts.items() if not s.healthy)
    if failed_hosts:
        verdict += f" ({len(failed_hosts)} host(s): {', '.join(failed_hosts)})"
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
    if result.drift:
        out.line(f"converged with site.yml ({len(result.drift)}):")
        for host, reasons in sorted(result.drift.items()):
            out.line(f"  {host}  {reasons[0]}" + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""))
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

"""``provision serve``: the serving endpoints and their health gate.

``provision serve status URL...`` probes each endpoint once with the gate (/health, /v1/models, a real
completion) and prints one line per endpoint; exit 1 unless all are ready.

``provision serve status INVENTORY`` does the same for every pool with a serving profile on every node of
the inventory, through the ``vllm_health`` action plugin (ad-hoc, via ansible-runner): the endpoint is the
node's address and the pool's port, liveness is the unit ``vllm-<pool>.service`` (so a refused port reads
loading or failed, never just unreachable), and a failed instance shows the last lines of its journal.
A multi-node group is probed through its head (ready = every rank joined); its headless workers
serve no API and show as ``worker`` of their head, with their unit's state, and do not count: the verdict
and the exit code are those of the heads and single-node instances.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import typer

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, connection_options, vault_options
from provision.cli._endpoints import endpoint, probe_inventory
from provision.cli.console import Console
from provision.errors import InputError
from provision.inventory.validate import check as check_inventory
from provision.runner.options import AnsibleOptions
from provision.serving.health import State, Timeouts, Verdict, check, serves_api

LOG_LINES = 20
"""Journal lines shown for a failed instance, unless --log-lines says otherwise."""

serve_app = typer.Typer(
    help="Serving endpoints: check vLLM instances with the health gate.",
    no_args_is_help=True,
)


@serve_app.command("status")
@connection_options
def status(
    urls: list[str] | None = typer.Argument(
        None,
        metavar="URL... | INVENTORY",
        show_default=False,
        help="Base URLs of OpenAI-compatible vLLM servers, e.g. http://10.0.0.5:8000 (host:port works too), "
        "or one Ansible inventory: every pool with a serving profile on every node.",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        envvar="PROVISION_SERVE_MODEL",
        help="Served model name that must be listed (default: the first one each endpoint lists).",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="PROVISION_API_KEY",
        callback=_inputs.api_key_option,
        help="Sent as 'Authorization: Bearer KEY' (vLLM --api-key) [default: an inventory's "
        "vllm_serve_api_key; URLs: $OPENAI_API_KEY]; on the command line every local user can read it: "
        "prefer --api-key-file.",
        show_default=False,
    ),
    api_key_file: Path | None = typer.Option(
        None,
        "--api-key-file",
        envvar="PROVISION_API_KEY_FILE",
        callback=_inputs.api_key_file_option,
        help="File whose first line is the key.",
        show_default=False,
    ),
    completion_timeout: float = typer.Option(
        30.0,
        "--completion-timeout",
        callback=_inputs.seconds,
        help="Seconds a completion may take before the engine counts as hung.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    limit: str | None = typer.Option(None, "--limit", "-l", help="INVENTORY only: these hosts/groups."),
    log_lines: int | None = typer.Option(
        None,
        "--log-lines",
        min=0,
        help=f"INVENTORY only: journal lines of a failed instance [default: {LOG_LINES}].",
        show_default=False,
    ),
    more_inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Check endpoints once with the health gate: ready, loading, failed or unreachable; exit 1 unless all
    are ready. An inventory is read (and probed) with ansible-playbook's connection, become and vault
    options."""
    urls = urls or []
    inventories = [Path(url) for url in urls if "://" not in url and Path(url).exists()]
    if (inventories or more_inventories) and len(urls) > len(inventories):
        raise InputError(f"{(inventories or more_inventories)[0]}: an inventory is given alone, without URLs")
    api_key = _inputs.api_key(api_key, api_key_file, url=not (inventories or more_inventories))
    if inventories or more_inventories:
        if model is not None:
            raise InputError("--model applies to URLs; with an inventory each pool's profile names its model")
        options = ansible.checked()
        _inventory_status(
            _inputs.inventories(None, [*inventories, *more_inventories]),
            api_key=api_key,
            completion_timeout=completion_timeout,
            as_json=as_json,
            limit=limit,
            log_lines=LOG_LINES if log_lines is None else log_lines,
            options=options,
        )
        return
    if not urls:
        raise InputError("give the URLs of the endpoints, or an inventory (INVENTORY or -i INVENTORY)")
    for option, value in (("--limit", limit), ("--log-lines", log_lines)):
        if value is not None:
            raise InputError(f"{option} applies to an inventory, not to URLs")
    endpoints = [endpoint(url, model, api_key) for url in urls]
    timeouts = Timeouts(completion_s=completion_timeout)
    with ThreadPoolExecutor(max_workers=min(16, len(endpoints))) as pool:
        verdicts = list(pool.map(lambda endpoint: check(endpoint, timeouts=timeouts), endpoints))
    all_ready = all(verdict.ready for verdict in verdicts)
    if as_json:
        typer.echo(json.dumps({"ready": all_ready, "endpoints": [v.as_dict() for v in verdicts]}, indent=2))
    else:
        _table(verdicts)
    if not all_ready:
        raise typer.Exit(1)


def _table(verdicts: list[Verdict]) -> None:
    out = Console.for_stream(sys.stdout)
    url_width = max(len("ENDPOINT"), *(len(v.url) for v in verdicts))
    model_width = max(len("MODEL"), *(len(v.model or "-") for v in verdicts))
    out.line(f"{'ENDPOINT':<{url_width}}  {'STATE':<11}  {'MODEL':<{model_width}}  DETAIL")
    for verdict in verdicts:
        out.line(
            f"{verdict.url:<{url_width}}  {verdict.state.value:<11}  "
            f"{verdict.model or '-':<{model_width}}  {verdict.reason}"
        )
    ready = sum(v.state is State.READY for v in verdicts)
    out.line(f"{ready}/{len(verdicts)} ready")


# ------------------------------------------------------------------------------------------ inventory


def _inventory_status(
    inventory: list[Path],
    *,
    api_key: str | None,
    completion_timeout: float,
    as_json: bool,
    limit: str | None,
    log_lines: int,
    options: AnsibleOptions,
) -> None:
    loaded = check_inventory(inventory, options.vault)  # bad input: exit 2, no host contacted
    limit = _inputs.limit(limit, loaded)
    _inputs.ask_passwords(options)
    rows = probe_inventory(
        inventory,
        api_key=api_key,
        completion_timeout=completion_timeout,
        limit=limit,
        log_lines=log_lines,
        options=options,
    )
    all_ready = ready(rows)
    if as_json:
        typer.echo(json.dumps({"ready": all_ready, "endpoints": rows}, indent=2))
    else:
        _inventory_table(rows)
    if not all_ready:
        raise typer.Exit(1)


def ready(rows: list[dict[str, Any]]) -> bool:
    """Every instance that serves an API (single-node instances and multi-node heads) is ready, and there is
    one at least; headless workers do not count (their head is ready only once every rank joined)."""
    serving = [row for row in rows if serves_api(row.get("role"))]
    return bool(serving) and all(row["state"] == State.READY.value for row in serving)


def _inventory_table(rows: list[dict[str, Any]]) -> None:
    out = Console.for_stream(sys.stdout)
    if not rows:
        out.line("no pool with a serving profile in the inventory")
        return
    headers = ("HOST", "POOL", "ENDPOINT", "STATE", "MODEL")
    cells = [
        (
            str(r["host"]),
            str(r.get("pool") or "-"),
            str(r["url"]),
            str(r["state"]),
            str(r.get("model") or "-"),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    out.line("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + "  DETAIL")
    for row, cell in zip(rows, cells, strict=True):
        out.line("  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) + f"  {row['reason']}")
        for line in row.get("log_tail") or []:
            out.line(f"    | {line}")
    serving = [r for r in rows if serves_api(r.get("role"))]
    up = sum(r["state"] == State.READY.value for r in serving)
    hosts = len({r["host"] for r in rows})
    workers = len(rows) - len(serving)
    tail = f" (+ {workers} multi-node worker(s), answered for by their head)" if workers else ""
    out.line(f"{up}/{len(serving)} ready on {hosts} host(s){tail}")


# ------------------------------------------------------------------------------------------ explain


@serve_app.command("explain")
@vault_options
def explain_command(
    inventory: Path | None = common.InventoryArg,
    target: str | None = typer.Argument(
        None,
        metavar="[HOST[/POOL]]",
        show_default=False,
        help="Only this host of npu_nodes, or one pool of it.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    more_inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Show what would run for each served pool, without contacting any host: the exact command line, the
    environment, the devices, the mounts, and every timeout of the load with where it came from (the
    profile's load_budget_s, the default, or the inventory's own setting)."""
    from provision.serving.explain import explain, render

    options = ansible.checked()
    loaded = check_inventory(_inputs.inventories(inventory, more_inventories), options.vault)
    records = explain(loaded, target)
    if as_json:
        typer.echo(json.dumps({"instances": records}, indent=2))
        return
    out = Console.for_stream(sys.stdout)
    for line in render(records):
        out.line(line)


def register(app: typer.Typer) -> None:
    from provision.cli import serve_key

    serve_key.register(serve_app)
    app.add_typer(serve_app, name="serve")

"""``provision version``: the tool, ansible-core, and the pinned stack."""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

import typer
from rich.table import Table

from provision import __version__
from provision.cli.console import Console


def _dist_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, object]:
    from provision.ascend.lock import default_stack

    return {
        "provision": __version__,
        "ansible-core": _dist_version("ansible-core"),
        "ansible-runner": _dist_version("ansible-runner"),
        "stack": default_stack(),
    }


def stacks() -> list[dict[str, Any]]:
    """Every stack of the version lock, oldest release first, the default one marked."""
    from provision.ascend import lock

    default = lock.default_stack_name()
    return [{**lock.stack(name), "default": name == default} for name in lock.stack_names()]


# The columns of `provision version --stacks`: lock key -> heading.
_STACK_COLUMNS = {
    "name": "stack",
    "kind": "kind",
    "vllm": "vllm",
    "cann": "CANN",
    "nnal": "NNAL",
    "torch": "torch",
    "torch_npu": "torch-npu",
    "triton_ascend": "triton-ascend",
    "python": "python",
    "driver": "driver",
    "hdk": "HDK lines",
}


def version(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    show_stacks: bool = typer.Option(
        False, "--stacks", help="List every stack of the version lock (provision_stack selects one)."
    ),
) -> None:
    """Show the tool, ansible-core and the pinned stack versions."""
    if show_stacks:
        _print_stacks(as_json)
        return
    info = versions()
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    out = Console.for_stream()
    out.line(f"provision       {info['provision']}")
    out.line(f"ansible-core    {info['ansible-core']}")
    out.line(f"ansible-runner  {info['ansible-runner']}")
    stack = info["stack"]
    assert isinstance(stack, dict)
    out.line(f"stack {stack.get('name')} (pinned):")
    for key, value in stack.items():
        if key in ("name", "sources", "base_images"):
            continue
        shown = ", ".join(value) if isinstance(value, list) else value
        out.line(f"  {key:<16}{shown}")
    out.line("other stacks: provision version --stacks")


def _print_stacks(as_json: bool) -> None:
    rows = stacks()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(box=None, pad_edge=False)
    for heading in _STACK_COLUMNS.values():
        table.add_column(heading)
    for row in rows:
        cells = [", ".join(row[k]) if isinstance(row[k], list) else str(row[k]) for k in _STACK_COLUMNS]
        if row["default"]:
            cells[0] += " (default)"
        table.add_row(*cells)
    Console.for_stream().rich.print(table)


def register(app: typer.Typer) -> None:
    app.command("version")(version)

"""``provision version``: the tool, ansible-core, and the pinned stack."""

from __future__ import annotations

import json
from importlib import metadata

import typer

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


def version(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show the tool, ansible-core and the pinned stack versions."""
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
        if key not in ("name", "sources"):
            out.line(f"  {key:<16}{value}")


def register(app: typer.Typer) -> None:
    app.command("version")(version)

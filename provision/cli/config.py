"""``provision config``: the Ansible settings a provision run uses, and where each comes from.

Ansible says it itself: ``ansible-config dump --only-changed`` run in the environment of a run
(:func:`provision.runner.run.ansible_env`, the strategy included), each origin then told as the user knows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from provision import paths
from provision.cli.console import Console
from provision.errors import EnvironmentProblem


def _origin(origin: str, run_env: Mapping[str, str]) -> str:
    """Where a setting comes from, as the user knows it: their file, their environment, or provision."""
    if origin.startswith("env: "):
        name = origin.removeprefix("env: ")
        if os.environ.get(name) == run_env.get(name):
            return f"environment {name}"
        return f"provision ({name})"
    if origin and Path(origin).resolve() == paths.ansible_cfg().resolve():
        return "provision (ansible.cfg)"
    return origin or "default"


def effective_settings() -> list[dict[str, Any]]:
    """Every setting a run changes from Ansible's defaults: ``{setting, value, origin}``, plugin settings as
    ``<type>/<plugin>: <name>``."""
    from provision.runner.run import ansible_env, strategy_settings

    run_env = {**os.environ, **ansible_env(), **strategy_settings()}
    ansible_config = Path(sys.executable).parent / "ansible-config"
    command = [str(ansible_config), "dump", "--only-changed", "-t", "all", "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, env=run_env, check=False, timeout=120)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ansible-config dump failed: {done.stderr.strip() or done.stdout.strip()}")
    rows: list[dict[str, Any]] = []
    for entry in json.loads(done.stdout):
        if "name" in entry:
            rows.append({"setting": entry["name"], "value": entry["value"], "origin": entry["origin"]})
            continue
        for kind, plugins in entry.items():  # {"CONNECTION_PLUGINS": [{"ssh": [settings]}, ...]}
            for plugin in plugins:
                for name, settings in plugin.items():
                    if "(DEPRECATED)" in name:
                        continue
                    for item in settings:
                        setting = f"{kind.removesuffix('_PLUGINS').lower()}/{name}: {item['name']}"
                        rows.append({"setting": setting, "value": item["value"], "origin": item["origin"]})
    for row in rows:
        row["origin"] = _origin(str(row["origin"]), run_env)
    return rows


def config(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show the Ansible settings a run uses and where each comes from (your ansible.cfg over provision's)."""
    rows = effective_settings()
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    out = Console.for_stream()
    width = max(len(row["setting"]) for row in rows)
    for row in rows:
        value = row["value"] if not isinstance(row["value"], list) else ", ".join(map(str, row["value"]))
        out.line(f"{row['setting']:<{width}}  {value}  [{row['origin']}]")


def register(app: typer.Typer) -> None:
    app.command("config")(config)

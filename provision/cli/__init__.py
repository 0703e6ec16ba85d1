"""The ``provision`` command line: one module per verb (see STYLE.md 13).

Each verb module exposes ``register(app: typer.Typer) -> None``. Options can also be given as
``PROVISION_<OPTION>`` environment variables where a verb declares ``envvar=``.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points
from typing import Any

import typer

from provision.errors import ProvisionError

# Verb modules, in the order ``provision --help`` lists them.
VERBS = (
    "bootstrap",
    "validate",
    "plan",
    "apply",
    "serve",
    "k8s",
    "doctor",
    "bench",
    "image",
    "bundle",
    "config",
    "version",
)
# Verbs other distributions add (``provision-sim`` adds ``sim``): entry points of this group, each a
# ``register(app)`` function.
VERB_ENTRY_POINTS = "provision.verbs"

app = typer.Typer(
    name="provision",
    help="Turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints, and keep them healthy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    """Turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints, and keep them healthy."""


for _verb in VERBS:
    importlib.import_module(f"provision.cli.{_verb}").register(app)
for _entry in entry_points(group=VERB_ENTRY_POINTS):
    _entry.load()(app)


def readable_metavars(command: Any) -> Any:
    """``command`` and its subcommands with argparse's metavars where none is given (``--extra-vars
    EXTRA_VARS``, ``INVENTORY``), as ansible-playbook's help shows them, instead of Python types
    (``<list[str]>``)."""
    for param in command.params:
        if (
            param.metavar is None
            and not getattr(param, "is_flag", False)
            and not getattr(param, "count", False)
        ):
            name = max(param.opts, key=len).lstrip("-") if param.opts else str(param.name)
            param.metavar = name.replace("-", "_").upper()
    for sub in (getattr(command, "commands", None) or {}).values():  # a group's verbs
        readable_metavars(sub)
    return command


def command() -> Any:
    """The ``provision`` command as click runs it."""
    return readable_metavars(typer.main.get_command(app))


def main() -> None:
    """Console-script entry point: typed errors become a message and an exit code, never a traceback."""
    from provision.cli.console import Console

    try:
        command()(prog_name="provision")
    except ProvisionError as exc:
        Console.for_stream(sys.stderr).error(str(exc))
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        Console.for_stream(sys.stderr).error("interrupted")
        raise SystemExit(130) from None

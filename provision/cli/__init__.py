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

HELP = "Turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints, and keep them healthy."


def _root() -> None:
    """Turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints, and keep them healthy."""


def build(verbs: tuple[str, ...] | None = None) -> typer.Typer:
    """The ``provision`` app with ``verbs`` (names of :data:`VERBS` or of entry points) registered, or
    every verb. A run needs only the verb it runs: each verb module imports what its work needs (bench
    aiohttp, bootstrap paramiko, bundle and image docker), and importing them all took 0.6 s of every
    run's 0.9 s of start-up."""
    app = typer.Typer(
        name="provision",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for verb in VERBS:
        if verbs is None or verb in verbs:
            importlib.import_module(f"provision.cli.{verb}").register(app)
    for entry in entry_points(group=VERB_ENTRY_POINTS):
        if verbs is None or entry.name in verbs:
            entry.load()(app)
    return app


def verb_of(argv: list[str]) -> tuple[str, ...] | None:
    """The verb ``argv`` (the arguments after ``provision``) runs, when its first word names a known one;
    None (every verb) for an option first (``-h``), no arguments or an unknown name, so that click lists
    the verbs or says what is wrong."""
    if not argv or argv[0].startswith("-"):
        return None
    known = set(VERBS) | {entry.name for entry in entry_points(group=VERB_ENTRY_POINTS)}
    return (argv[0],) if argv[0] in known else None


_FULL: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    """``provision.cli.app``: the app with every verb, built on first use."""
    global _FULL
    if name == "app":
        if _FULL is None:
            _FULL = build()
        return _FULL
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def command(argv: list[str] | None = None) -> Any:
    """The ``provision`` command as click runs it: with only the verb ``argv`` runs, else every verb."""
    app = build(verb_of(argv)) if argv is not None else __getattr__("app")
    return readable_metavars(typer.main.get_command(app))


def main() -> None:
    """Console-script entry point: typed errors become a message and an exit code, never a traceback."""
    from provision.ansible_config import quiet_import_noise
    from provision.cli.console import Console

    quiet_import_noise()
    try:
        command(sys.argv[1:])(prog_name="provision")
    except ProvisionError as exc:
        Console.for_stream(sys.stderr).error(str(exc))
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        Console.for_stream(sys.stderr).error("interrupted")
        raise SystemExit(130) from None

"""The ``provision`` command line: one module per verb (see STYLE.md 13).

Each verb module exposes ``register(app: typer.Typer) -> None``. Options can also be given as
``PROVISION_<OPTION>`` environment variables where a verb declares ``envvar=``.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import entry_points

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
)


@app.callback()
def _root() -> None:
    """Turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints, and keep them healthy."""


for _verb in VERBS:
    importlib.import_module(f"provision.cli.{_verb}").register(app)
for _entry in entry_points(group=VERB_ENTRY_POINTS):
    _entry.load()(app)


def main() -> None:
    """Console-script entry point: typed errors become a message and an exit code, never a traceback."""
    from provision.cli.console import Console

    try:
        app()
    except ProvisionError as exc:
        Console.for_stream(sys.stderr).error(str(exc))
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        Console.for_stream(sys.stderr).error("interrupted")
        raise SystemExit(130) from None

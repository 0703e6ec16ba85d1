"""Output for the CLI: rich on a terminal, plain lines when not a TTY or in CI."""

from __future__ import annotations

import os
import sys
from typing import TextIO

import rich.console


def is_interactive(stream: TextIO) -> bool:
    """True when output goes to a person: a TTY and not CI (``CI`` or ``PROVISION_QUIET`` set means no)."""
    if os.environ.get("CI") or os.environ.get("PROVISION_QUIET"):
        return False
    return stream.isatty()


class Console:
    """A thin wrapper so every verb prints the same way."""

    def __init__(self, stream: TextIO, interactive: bool) -> None:
        self.stream = stream
        self.interactive = interactive
        self.rich = rich.console.Console(
            file=stream,
            force_terminal=interactive,
            no_color=not interactive,
            highlight=False,
            emoji=False,  # "ttft:soon" or a host:port is text, not an emoji code
            soft_wrap=not interactive,
            width=None if interactive else 200,
        )

    @classmethod
    def for_stream(cls, stream: TextIO | None = None) -> Console:
        stream = stream or sys.stdout
        return cls(stream, is_interactive(stream))

    def line(self, text: str = "") -> None:
        self.rich.print(text, markup=False)

    def error(self, text: str) -> None:
        prefix = "[bold red]error:[/] " if self.interactive else "error: "
        self.rich.print(prefix, end="")
        self.rich.print(text, markup=False)

    def status(self, text: str) -> None:
        self.rich.print(text, markup=False, style="bold" if self.interactive else None)

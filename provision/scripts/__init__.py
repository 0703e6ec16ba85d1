"""The scripts provision runs on the nodes, as files: POSIX sh (``*.sh``, run as ``sh -c SCRIPT NAME ARGS``)
and Python (``*.py``, run as ``python3 -c SCRIPT ARGS`` by the node's own Python, 3.6 or newer).

Files so that linters read them (``make lint``: shellcheck, ruff, mypy); loaded as package resources, so the
wheel carries them. :func:`node_script` returns exactly what reaches the node: the file's text without its
lint directives (``# shellcheck ...`` lines, for the linter alone) and surrounding blank lines, with each
``@NAME@`` placeholder replaced by the controller's value (paths and lists whose one definition is a Python
constant).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
_DIRECTIVE = re.compile(r"^[ \t]*# shellcheck [a-z-]+=.*\n", re.MULTILINE)


@cache
def _text(name: str) -> str:
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return _DIRECTIVE.sub("", text).strip()


def node_script(name: str, **values: str) -> str:
    """The script ``name`` of this folder with its ``@NAME@`` placeholders filled from ``values``.

    A placeholder without a value, or a value without a placeholder, is a programming error (ValueError):
    the node would run a literal ``@NAME@``, or the caller believes a value reaches the node that does not.
    """
    text = _text(name)
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ValueError(
            f"node script {name}: placeholders {sorted(wanted)}, values given for {sorted(values)}"
        )
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

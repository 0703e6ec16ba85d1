"""``provision.ascend`` imports each parser's module only when one of its names is asked for: its three lists
(the imports mypy reads, the name -> module map the runtime reads, ``__all__``) must name the same things."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import provision.ascend as ascend

pytestmark = pytest.mark.unit


def _type_checking_imports() -> dict[str, str]:
    tree = ast.parse(Path(ascend.__file__).read_text(encoding="utf-8"))
    guarded = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: str(node.module).rsplit(".", 1)[1]
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_three_lists_agree_and_every_name_is_its_modules() -> None:
    assert _type_checking_imports() == ascend._MODULE_OF
    assert sorted(ascend.__all__) == sorted(ascend._MODULE_OF)
    for name, module in ascend._MODULE_OF.items():
        assert getattr(ascend, name) is getattr(importlib.import_module(f"provision.ascend.{module}"), name)
    with pytest.raises(AttributeError):
        ascend.no_such_parser  # noqa: B018


def test_one_module_does_not_import_the_others() -> None:
    code = (
        "import sys, provision.ascend.lock\n"
        "print(sorted(m for m in sys.modules if m.startswith('provision.ascend.')))\n"
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["['provision.ascend.lock']", "False"]

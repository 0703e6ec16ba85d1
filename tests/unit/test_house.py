"""The product and the rehearsal rig: the product (provision/, the Ansible plugins and role plugins) never
imports the rig (provision_sim), so a controller without provision-sim installed runs every verb but sim."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
PRODUCT = [ROOT / "provision", ROOT / "plugins", ROOT / "roles"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return found


def test_the_product_never_imports_the_rig() -> None:
    sources = [p for folder in PRODUCT for p in sorted(folder.rglob("*.py"))]
    assert len(sources) > 50  # the scan saw the product
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m.split(".")[0] == "provision_sim"
        )
        for path in sources
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_scan_sees_an_import_of_the_rig(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "import provision_sim.cluster\nfrom provision_sim import nodes\n"
        "import importlib\nimportlib.import_module('provision_sim.cli')\n"
    )
    assert imported_modules(sample) == {
        "provision_sim.cluster",
        "provision_sim",
        "importlib",
        "provision_sim.cli",
    }

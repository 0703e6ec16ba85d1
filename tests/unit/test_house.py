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


def test_only_the_runner_imports_ansible_runner() -> None:
    """One seam to ansible-runner: every run gets its environment, run directory and events from
    provision/runner/, so no other module starts Ansible its own way."""
    runner = ROOT / "provision" / "runner"
    folders = [*PRODUCT, ROOT / "provision-sim" / "provision_sim"]
    sources = [p for folder in folders for p in sorted(folder.rglob("*.py"))]
    importers = [
        path for path in sources if "ansible_runner" in {m.split(".")[0] for m in imported_modules(path)}
    ]
    assert importers, "the scan found no import of ansible_runner at all"
    outside = [str(path.relative_to(ROOT)) for path in importers if not path.is_relative_to(runner)]
    assert outside == []


ABOVE_INVENTORY = ("provision.serving", "provision.runner", "provision.cli")


def imports_from_above_the_inventory(path: Path) -> list[str]:
    """The modules of serving, the runner or the CLI that ``path`` imports (``from provision import serving``
    included: there the package is in the import's names, not in its module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    modules = imported_modules(path) | {
        f"provision.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "provision" and node.level == 0
        for alias in node.names
    }
    return sorted(m for m in modules if any(m == up or m.startswith(f"{up}.") for up in ABOVE_INVENTORY))


def test_the_inventory_layer_never_imports_what_runs_on_it() -> None:
    """Data flows one way: provision.inventory (load, validate, the models of pools, profiles and serving
    groups) sits beneath serving, the runner and the CLI, which import it; never the other way round."""
    sources = sorted((ROOT / "provision" / "inventory").rglob("*.py"))
    assert len(sources) >= 6  # the scan saw the layer
    offenders = {str(path.relative_to(ROOT)): imports_from_above_the_inventory(path) for path in sources}
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_layer_scan_sees_an_import_from_above(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from provision import serving, errors\nimport provision.runner.run\n"
        "from provision.inventory import load\n"
        "def f():\n    from provision.cli.serve import app\n    import provision.servings\n"
    )
    assert imports_from_above_the_inventory(sample) == [
        "provision.cli.serve",
        "provision.runner.run",
        "provision.serving",
    ]


# The lock's default stack is read here only: every other module asks provision.ascend.lock.resolve_stack or
# host_stack, so "which stack does this host run" has one answer. `provision version` lists the lock itself
# (its default included), not a host's stack.
STACK_DEFAULT_READERS = {"provision/ascend/lock.py", "provision/cli/version.py"}


def stack_default_reads(path: Path) -> list[int]:
    """The lines of ``path`` that read the lock's default stack (``default_stack_name()``/``default_stack()``,
    or ``load_lock()["default"]``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("default_stack_name", "default_stack"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call):
            called = getattr(node.value.func, "attr", None) or getattr(node.value.func, "id", None)
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if called == "load_lock" and key == "default":
                lines.append(node.lineno)
    return sorted(lines)


def test_the_stack_a_host_runs_is_resolved_in_the_lock_alone() -> None:
    sources = [p for folder in PRODUCT for p in sorted(folder.rglob("*.py"))]
    offenders = {
        str(path.relative_to(ROOT)): stack_default_reads(path)
        for path in sources
        if str(path.relative_to(ROOT)) not in STACK_DEFAULT_READERS
    }
    assert {path: lines for path, lines in offenders.items() if lines} == {}
    # the scan sees the lock's own definition
    assert stack_default_reads(ROOT / "provision" / "ascend" / "lock.py")


def test_the_stack_scan_sees_a_second_resolution(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from provision.ascend import lock\nfrom provision.ascend.lock import default_stack, load_lock\n"
        "name = stack or lock.default_stack_name()\n"
        "entry = default_stack()\n"
        "other = load_lock()['default']\n"
        "fine = lock.resolve_stack(stack).name\n"
    )
    assert stack_default_reads(sample) == [3, 4, 5]

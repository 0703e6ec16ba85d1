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


# ansible-runner's raw event vocabulary: its keys and its event names. provision/runner/ reads them once
# (provision.runner.events) and hands the rest of provision typed TaskEvents and RunResults.
_EVENT_WORDS = (
    "event_data",
    "runner_on_",
    "runner_item_on_",
    "playbook_on_",
    "resolved_action",
    "task_action",
)


def runner_event_reads(path: Path) -> list[int]:
    """The lines of ``path`` whose string constants name a raw ansible-runner event key or event."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return sorted(
        {
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and any(node.value == w or (w.endswith("_") and node.value.startswith(w)) for w in _EVENT_WORDS)
        }
    )


def test_only_the_runner_decodes_ansible_runner_events() -> None:
    runner = ROOT / "provision" / "runner"
    sources = [p for p in sorted((ROOT / "provision").rglob("*.py")) if not p.is_relative_to(runner)]
    offenders = {str(p.relative_to(ROOT)): runner_event_reads(p) for p in sources}
    assert {path: lines for path, lines in offenders.items() if lines} == {}
    # the scan sees the runner's own reading
    assert runner_event_reads(runner / "events.py")


def test_the_event_scan_sees_a_raw_event_read(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "def handle(event):\n"
        "    data = event.get('event_data') or {}\n"
        "    if event['event'] == 'runner_on_ok':\n"
        "        return data.get('res')\n"
        "    return 'event_data is fine in a sentence'\n"
    )
    assert runner_event_reads(sample) == [2, 3]


# ansible-playbook's connection, become and vault options: declared in provision/cli/_ansible_options.py
# alone; a verb takes them with its connection_options/vault_options decorator.
ANSIBLE_OPTION_HOME = "provision/cli/_ansible_options.py"
# Same flag, another meaning: these verbs run no ansible-playbook with it.
SAME_FLAG_OTHER_MEANING = {
    "provision/cli/bootstrap.py": frozenset({"--user", "-u"}),  # the first SSH login (paramiko)
    "provision/cli/image.py": frozenset({"--vault-password-file"}),  # the registry credentials' vault file
}
ANSIBLE_FLAGS = frozenset(
    {
        "--user", "-u", "--private-key", "--key-file", "--ssh-common-args", "--ask-pass", "-k",
        "--connection-password-file", "--conn-pass-file", "--become", "-b", "--ask-become-pass", "-K",
        "--become-password-file", "--become-pass-file", "--vault-id", "--vault-password-file",
        "--vault-pass-file", "--ask-vault-pass", "-J",
    }
)  # fmt: skip


def ansible_option_declarations(path: Path, other_meaning: frozenset[str] = frozenset()) -> list[int]:
    """The lines of ``path`` declaring a CLI option (``typer.Option``/``Option``) under one of
    ansible-playbook's connection, become or vault flags (but those of ``other_meaning``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        flags = {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
        if name == "Option" and (flags & ANSIBLE_FLAGS) - other_meaning:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_ansible_options_have_one_definition() -> None:
    sources = sorted((ROOT / "provision").rglob("*.py"))
    offenders = {
        name: ansible_option_declarations(p, SAME_FLAG_OTHER_MEANING.get(name, frozenset()))
        for p in sources
        if (name := str(p.relative_to(ROOT))) != ANSIBLE_OPTION_HOME
    }
    assert {path: lines for path, lines in offenders.items() if lines} == {}
    # the scan sees every one of the home's eleven declarations
    assert len(ansible_option_declarations(ROOT / ANSIBLE_OPTION_HOME)) == 11


def test_the_option_scan_sees_a_second_definition(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "import typer\nfrom typer import Option\n"
        "A = typer.Option(None, '--user', '-u', help='x')\n"
        "B = Option([], '--vault-id')\n"
        "C = typer.Option(None, '--limit', '-l')\n"
    )
    assert ansible_option_declarations(sample) == [3, 4]
    assert ansible_option_declarations(sample, frozenset({"--user", "-u"})) == [4]


def test_apply_s_inventory_argument_climbs_back_up_at_most_three_times() -> None:
    """benchmarks/inventory_walk.py follows the inventory through ``provision apply`` (ansible-runner
    scripted, no host contacted): the CLI validates and resolves it once, then hands the view down."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "inventory_walk.py"), "--max-climbs", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== this tree: " in done.stdout
    walk = done.stdout.split("walk: ", 1)[1].splitlines()[0].split(" -> ")
    assert walk[:2] == ["cli", "inventory"] and "converge" in walk  # the engine was walked
    assert "climbs: provision.inventory.load.plain" not in done.stdout

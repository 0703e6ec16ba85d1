"""Dependencies declared as imported: every third-party package the product (provision/, plugins/) or the rig
(provision-sim/) imports is declared in its pyproject.toml, and every runtime dependency declared is
imported. The floors are proven by .ci/unit-variant lowest (.ci/lowest_constraints.py pins each to its floor).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from provision.bench.client import LocalTokenizer
from provision.errors import InputError

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
FIRST_PARTY = {"provision", "provision_sim", "ansible_collections"}
# (pyproject.toml, the source folders it ships)
PROJECTS = {
    "provision": (ROOT / "pyproject.toml", [ROOT / "provision", ROOT / "plugins"]),
    "provision-sim": (ROOT / "provision-sim/pyproject.toml", [ROOT / "provision-sim/provision_sim"]),
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def spec_name(spec: str) -> str:
    return canonical(re.split(r"[<>=!~;\[\s@]", spec, maxsplit=1)[0])


def imported(folders: list[Path]) -> dict[str, str]:
    """Distribution -> one file importing it: ``import``/``from`` statements, and ``find_spec("name")`` (a
    package used when present, as Mitogen's strategy)."""
    modules = packages_distributions()
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "find_spec"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)
                ):
                    names = [node.args[0].value]
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in FIRST_PARTY:
                        continue
                    for dist in modules.get(top, [top]):  # not installed: its own name
                        found.setdefault(canonical(dist), str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", PROJECTS)
def test_every_import_is_declared_and_every_dependency_imported(name: str) -> None:
    pyproject, folders = PROJECTS[name]
    table = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    runtime = {spec_name(spec) for spec in table["dependencies"]} - {"provision"}
    extras = {
        spec_name(spec)
        for extra, specs in table.get("optional-dependencies", {}).items()
        if extra != "test"
        for spec in specs
    }
    uses = imported(folders)
    undeclared = {dist: where for dist, where in uses.items() if dist not in runtime | extras}
    assert undeclared == {}, f"{pyproject.relative_to(ROOT)}: imported, not declared"
    assert runtime - set(uses) == set(), f"{pyproject.relative_to(ROOT)}: declared, never imported"


def test_a_local_tokenizer_json_encodes_and_decodes(tmp_path: Path) -> None:
    """`provision bench --tokenizer PATH` on the declared extra (provision[tokenizer])."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "npu": 2, "world": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    local = LocalTokenizer(str(tmp_path))  # a folder holding tokenizer.json
    assert local.encode("hello npu world") == [1, 2, 3]
    assert local.decode([3, 1]) == "world hello"
    with pytest.raises(InputError, match=r"no tokenizer\.json there"):
        LocalTokenizer(str(tmp_path / "absent"))

"""Every role's README has the usual shape (Requirements, Role Variables, Dependencies, Example Playbook), and
its Role Variables table tells the truth: exactly the options of meta/argument_specs.yml, and a default given
as one literal is the value of defaults/main.yml (what ``ansible-doc -t role`` shows too, test_roles.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())
SECTIONS = ["## Requirements", "## Role Variables", "## Dependencies", "## Example Playbook"]
ROW = re.compile(r"^\| `(?P<name>[a-z0-9_]+)` \| (?P<default>(?:[^|\\]|\\.)*?) \|")
LITERAL = re.compile(r"^`(?P<value>[^`]*)`$")


def section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_readme_has_the_usual_sections_in_order(role: Path) -> None:
    text = (role / "README.md").read_text()
    headings = [line for line in text.splitlines() if line in SECTIONS]
    assert headings == SECTIONS, f"{role.name}/README.md: {headings}"
    example = section(text, "## Example Playbook")
    assert f"role: provision.ascend.{role.name}" in example
    playbook = yaml.safe_load(example.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert playbook[0]["hosts"] and playbook[0]["roles"][0]["role"] == f"provision.ascend.{role.name}"
    dependencies = yaml.safe_load((role / "meta" / "main.yml").read_text())["dependencies"]
    assert dependencies == [] and section(text, "## Dependencies").strip().startswith("None")


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_variables_table_is_the_argument_specs(role: Path) -> None:
    text = (role / "README.md").read_text()
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    rows = [m for line in section(text, "## Role Variables").splitlines() if (m := ROW.match(line))]
    names = [m["name"] for m in rows]
    assert len(names) == len(set(names)), f"{role.name}: a variable listed twice"
    assert set(names) == set(options["options"]), f"{role.name}: table {set(names) ^ set(options['options'])}"
    for row in rows:
        literal = LITERAL.match(row["default"].strip())
        if literal is None:  # prose ("the lock's ...", "provision_mirror_url")
            continue
        value, wanted = literal["value"].replace("\\|", "|"), defaults[row["name"]]
        if isinstance(wanted, str):  # a template's line breaks are spaces to Jinja
            shown, wanted = (
                " ".join(yaml.safe_load(value).split() if value in ('""', "''") else value.split()),
                (" ".join(wanted.split())),
            )
        else:
            shown = yaml.safe_load(value)
        assert shown == wanted, (
            f"{role.name}: {row['name']}: README says {value}, defaults/main.yml {wanted!r}"
        )

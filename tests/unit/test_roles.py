"""Role conventions (STYLE.md 5, 6): argument_specs equal defaults; every role variable is prefixed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROLES = sorted(p for p in (Path(__file__).parents[2] / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_argument_specs_match_defaults(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults), f"{role.name}: argument_specs and defaults differ"
    for name, spec in options.items():
        assert spec.get("description"), f"{role.name}: {name} has no description"
        assert spec.get("type"), f"{role.name}: {name} has no type"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_variables_are_prefixed(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert all(name.startswith(f"{role.name}_") for name in defaults), sorted(defaults)


def test_roles_exist() -> None:
    assert "preflight" in [r.name for r in ROLES]

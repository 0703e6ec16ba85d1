"""Role conventions (STYLE.md 5, 6): argument_specs equal defaults (names and values, so that
``ansible-doc -t role`` shows the defaults the role runs with); every role variable is prefixed."""

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
        # a missing default is null to ansible-doc: right only where defaults/main.yml says null too
        assert spec.get("default") == defaults[name], (
            f"{role.name}: {name}: argument_specs says {spec.get('default')!r}, "
            f"defaults/main.yml {defaults[name]!r}"
        )


def test_the_bench_gate_options_show_the_module_defaults() -> None:
    """vllm_serve_bench_gate's keys go to the module vllm_bench_gate (``| default(omit)``), so the role's
    documented defaults are that module's."""
    root = Path(__file__).parents[2]
    specs = yaml.safe_load((root / "roles/vllm_serve/meta/argument_specs.yml").read_text())
    role_options = specs["argument_specs"]["main"]["options"]["vllm_serve_bench_gate"]["options"]
    module_source = (root / "plugins/modules/vllm_bench_gate.py").read_text()
    module_doc = yaml.safe_load(module_source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
    for name, spec in role_options.items():
        assert spec.get("default") == module_doc["options"][name].get("default"), name


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_variables_are_prefixed(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert all(name.startswith(f"{role.name}_") for name in defaults), sorted(defaults)


def test_roles_exist() -> None:
    assert "preflight" in [r.name for r in ROLES]


def test_ansible_doc_shows_every_role_option_with_its_default() -> None:
    """What ``ansible-doc -t role`` prints (it reads meta/argument_specs.yml): no ``default: null`` left where
    defaults/main.yml gives a value."""
    from tests.unit.test_ansible_doc import ansible_doc

    docs, stderr = ansible_doc("-t", "role", *(f"provision.ascend.{role.name}" for role in ROLES))
    assert "ERROR" not in stderr, stderr
    for role in ROLES:
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
        options = docs[f"provision.ascend.{role.name}"]["entry_points"]["main"]["options"]
        assert {name: spec.get("default") for name, spec in options.items()} == defaults, role.name

"""``systemctl show`` is parsed in one place (provision.systemd): the actions, the converged record and the
vllm_serve role's ``provision_unit_states`` filter all read it there."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from provision import systemd
from provision.runner.record import unit_state
from tests.helpers import load_module

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]

# What `systemctl show --property=Id,UnitFileState,ActiveState a b c` prints: systemd's own property order,
# one block per unit, and a block for a unit that does not exist.
SEVERAL = (
    "ActiveState=active\nUnitFileState=enabled\nId=vllm-a.service\n\n"
    "Id=vllm-b.service\nActiveState=failed\nUnitFileState=disabled\n\n"
    "Id=vllm-gone.service\nActiveState=inactive\nUnitFileState=\n"
)


def _filters() -> ModuleType:
    return load_module("provision_filter_provision", ROOT / "plugins/filter/provision.py")


def test_show_of_several_units_is_keyed_by_unit_id() -> None:
    assert systemd.parse_show_units(SEVERAL) == {
        "vllm-a.service": {"ActiveState": "active", "UnitFileState": "enabled", "Id": "vllm-a.service"},
        "vllm-b.service": {"Id": "vllm-b.service", "ActiveState": "failed", "UnitFileState": "disabled"},
        "vllm-gone.service": {"Id": "vllm-gone.service", "ActiveState": "inactive", "UnitFileState": ""},
    }
    assert systemd.parse_show_units("") == {}
    assert systemd.parse_show_units("ActiveState=active\n") == {}, "a block without Id names no unit"


def test_the_roles_filter_is_the_same_parser() -> None:
    unit_states = _filters().FilterModule().filters()["provision_unit_states"]
    assert unit_states(SEVERAL) == systemd.parse_show_units(SEVERAL)
    assert unit_states(None) == {}, "a skipped read (no stdout) is no unit"


def test_the_record_keeps_its_three_properties_of_a_unit() -> None:
    shown = "Id=docker.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
    assert unit_state(shown) == {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    assert unit_state("") == {"LoadState": "", "ActiveState": "", "UnitFileState": ""}, "no systemctl"

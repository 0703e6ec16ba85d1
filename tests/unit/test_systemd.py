"""``systemctl show`` is parsed in one place (provision.systemd): the actions and the converged record read
it there."""

from __future__ import annotations

import pytest

from provision import systemd
from provision.converge.record import unit_state

pytestmark = pytest.mark.unit

# What `systemctl show --property=Id,UnitFileState,ActiveState a b c` prints: systemd's own property order,
# one block per unit, and a block for a unit that does not exist.
SEVERAL = (
    "ActiveState=active\nUnitFileState=enabled\nId=vllm-a.service\n\n"
    "Id=vllm-b.service\nActiveState=failed\nUnitFileState=disabled\n\n"
    "Id=vllm-gone.service\nActiveState=inactive\nUnitFileState=\n"
)


def test_show_of_several_units_is_keyed_by_unit_id() -> None:
    assert systemd.parse_show_units(SEVERAL) == {
        "vllm-a.service": {"ActiveState": "active", "UnitFileState": "enabled", "Id": "vllm-a.service"},
        "vllm-b.service": {"Id": "vllm-b.service", "ActiveState": "failed", "UnitFileState": "disabled"},
        "vllm-gone.service": {"Id": "vllm-gone.service", "ActiveState": "inactive", "UnitFileState": ""},
    }
    assert systemd.parse_show_units("") == {}
    assert systemd.parse_show_units("ActiveState=active\n") == {}, "a block without Id names no unit"


def test_the_record_keeps_its_three_properties_of_a_unit() -> None:
    shown = "Id=docker.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\n"
    assert unit_state(shown) == {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    assert unit_state("") == {"LoadState": "", "ActiveState": "", "UnitFileState": ""}, "no systemctl"

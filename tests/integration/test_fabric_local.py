"""The fabric stage (hccn_config) on this machine (local connection, no cluster): the simulated hccn_tool of a
node root in a temporary folder stands in for the driver's, behind a wrapper at ``hccn_config_tool``.

From a node whose ports have addresses and gateways but no detect address, with one address moved by hand:
plan (check mode) changes nothing on the node, apply sets exactly what differs, a second apply changes
nothing, and /etc/hccn.conf holds the plan."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from provision_sim.hardware.testroot import SimRoot
from tests.helpers import localhost_inventory, provision_ok
from tests.unit.test_hccn_gate_checks import HCCN, driver_run, simulated_node

__all__ = ["driver_run"]  # a fixture

pytestmark = pytest.mark.slow
TIMEOUT_S = 300
SET_TASK = "hccn_config : Set what differs from the plan"


def wrapper(sim: SimRoot, folder: Path) -> Path:
    """An executable ``hccn_tool`` that runs the node root's simulated tool."""
    path = folder / "hccn_tool"
    path.write_text(
        f'#!/bin/sh\nPROVISION_SIM_ROOT={sim.root} exec {sys.executable} {sim.path(HCCN)} "$@"\n',
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def test_fabric_stage_sets_what_differs_and_then_nothing(tmp_path: Path, driver_run: Path) -> None:
    sim = simulated_node(tmp_path / "node", driver_run, 2)
    moved = sim.tool(HCCN, "-i", "3", "-ip", "-s", "address", "10.201.3.99", "netmask", "255.255.255.0")
    assert moved.returncode == 0, moved.stderr
    (tmp_path / "inventory").mkdir()
    inventory = localhost_inventory(
        tmp_path / "inventory",
        {
            "hccn_config_tool": str(wrapper(sim, tmp_path)),
            "hccn_config_subnets": [
                {"subnet": f"10.201.{n}.0/24", "gateway": f"10.201.{n}.1"} for n in range(8)
            ],
            "hccn_config_first_host": 10,
            "hccn_config_node_index": 2,
        },
    )
    runs = tmp_path / "runs"
    conf = sim.path("/etc/hccn.conf")
    before = conf.read_text()

    plan = provision_ok("plan", str(inventory), "-p", "fabric", runs=runs, timeout=TIMEOUT_S)
    assert "hccn_config : Say what would be set (check mode)" in {c["task"] for c in plan["changes"]}, plan
    assert conf.read_text() == before, "plan changed nothing"

    first = provision_ok("apply", str(inventory), "-p", "fabric", runs=runs, timeout=TIMEOUT_S)
    # one changed task: it set NPU 3's address and the 8 detect addresses the fresh node lacks
    assert first["hosts"]["localhost"]["changed"] == 1, first
    assert {c["task"] for c in first["changes"]} == {SET_TASK}, first["changes"]
    lines = conf.read_text().splitlines()
    # only what differed was set: no other port's address, no gateway (they matched already)
    assert sorted(line.split("=")[0] for line in lines) == sorted(
        ["address_3", "netmask_3", *(f"netdetect_{n}" for n in range(8))]
    ), lines
    assert "address_3=10.201.3.12" in lines and "netmask_3=255.255.255.0" in lines
    assert [line for line in lines if line.startswith("netdetect_")] == [
        f"netdetect_{n}=10.201.{n}.1" for n in range(8)
    ]
    assert sim.tool(HCCN, "-i", "3", "-ip", "-g").stdout == "ipaddr:10.201.3.12\nnetmask:255.255.255.0\n"

    again = provision_ok("apply", str(inventory), "-p", "fabric", runs=runs, timeout=TIMEOUT_S)
    assert again["hosts"]["localhost"]["changed"] == 0

"""npu_pools on this machine (local connection): plan -> apply -> apply again = 0 changed -> files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import localhost_inventory, provision_ok

pytestmark = pytest.mark.slow
TIMEOUT_S = 300


def test_pools_dry_run_real_run_repeat(tmp_path: Path) -> None:
    pools_dir = tmp_path / "pools"
    inventory = localhost_inventory(
        tmp_path,
        {
            "npu_pools_config_dir": str(pools_dir),
            "npu_pools_check_detected": False,
            "npu_pools_list": [
                {"name": "chat", "devices": [0, 1, 2, 3], "port": 8000},
                {"name": "batch", "devices": [4, 5, 6, 7], "port": 8001},
            ],
        },
    )
    (pools_dir).mkdir()
    (pools_dir / "old.env").write_text("NPU_POOL_NAME=old\n")
    runs = tmp_path / "runs"
    args = ("--tags", "npu_pools")

    plan = provision_ok("plan", str(inventory), *args, runs=runs, timeout=TIMEOUT_S)
    changed_tasks = {c["task"] for c in plan["changes"]}
    assert "npu_pools : Write one environment file per pool" in changed_tasks
    assert sorted(p.name for p in pools_dir.iterdir()) == ["old.env"], "plan changed nothing"

    first = provision_ok("apply", str(inventory), *args, runs=runs, timeout=TIMEOUT_S)
    assert first["hosts"]["localhost"]["changed"] >= 2
    chat = (pools_dir / "chat.env").read_text()
    assert "ASCEND_VISIBLE_DEVICES=0,1,2,3\n" in chat
    assert "NPU_POOL_PORT=8000\n" in chat
    assert "NPU_POOL_DEVICE_NODES=/dev/davinci0 /dev/davinci1 /dev/davinci2 /dev/davinci3\n" in chat
    assert sorted(p.name for p in pools_dir.iterdir()) == ["batch.env", "chat.env"], "stale pool removed"

    again = provision_ok("apply", str(inventory), *args, runs=runs, timeout=TIMEOUT_S)
    assert again["hosts"]["localhost"]["changed"] == 0

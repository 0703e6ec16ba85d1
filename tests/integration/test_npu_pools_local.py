"""npu_pools on this machine (local connection): plan -> apply -> apply again = 0 changed -> files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def provision(*args: str, runs: Path) -> dict[str, object]:
    env = {**os.environ, "PROVISION_RUNS_DIR": str(runs), "CI": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "provision", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, object] = json.loads(done.stdout)
    return summary


def test_pools_dry_run_real_run_repeat(tmp_path: Path) -> None:
    pools_dir = tmp_path / "pools"
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(
        json.dumps(
            {
                "npu_pools_config_dir": str(pools_dir),
                "npu_pools_check_detected": False,
                "npu_pools_list": [
                    {"name": "chat", "devices": [0, 1, 2, 3], "port": 8000},
                    {"name": "batch", "devices": [4, 5, 6, 7], "port": 8001},
                ],
            }
        )
    )
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    (pools_dir).mkdir()
    (pools_dir / "old.env").write_text("NPU_POOL_NAME=old\n")
    runs = tmp_path / "runs"
    args = ("--tags", "npu_pools")

    plan = provision("plan", str(inventory), *args, runs=runs)
    changed_tasks = {c["task"] for c in plan["changes"]}  # type: ignore[union-attr]
    assert "npu_pools : Write one environment file per pool" in changed_tasks
    assert sorted(p.name for p in pools_dir.iterdir()) == ["old.env"], "plan changed nothing"

    first = provision("apply", str(inventory), *args, runs=runs)
    assert first["hosts"]["localhost"]["changed"] >= 2  # type: ignore[index]
    chat = (pools_dir / "chat.env").read_text()
    assert "ASCEND_VISIBLE_DEVICES=0,1,2,3\n" in chat
    assert "NPU_POOL_PORT=8000\n" in chat
    assert "NPU_POOL_DEVICE_NODES=/dev/davinci0 /dev/davinci1 /dev/davinci2 /dev/davinci3\n" in chat
    assert sorted(p.name for p in pools_dir.iterdir()) == ["batch.env", "chat.env"], "stale pool removed"

    again = provision("apply", str(inventory), *args, runs=runs)
    assert again["hosts"]["localhost"]["changed"] == 0  # type: ignore[index]

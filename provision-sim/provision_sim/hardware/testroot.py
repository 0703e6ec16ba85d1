"""A node root in a temporary folder, for unit tests of the simulated hardware (no nspawn, no root).

The node-side tools honour ``$PROVISION_SIM_ROOT``: every absolute path they touch is resolved under
it, ``command -v`` looks only in the root's ``/usr/bin`` etc., device nodes fall back to plain files
when ``mknod`` is not permitted, and the PCI view is written but not bind-mounted. A reboot is
simulated by emptying ``/run`` and ``/dev`` and running the boot unit's command.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from provision_sim.hardware import ENGINE_DIR, install_tools, set_faults, write_node_config

PREREQUISITES = ("lspci", "ifconfig", "dkms", "gcc", "make")
"""Commands the driver installer looks for; :meth:`SimRoot.create` provides stubs of them by default."""


class SimRoot:
    """A temporary node root with the simulator installed (``/`` of the node is :attr:`root`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        name: str = "node1",
        index: int = 1,
        npus: int = 8,
        model: str = "910B3",
        faults: Mapping[str, object] | None = None,
        hwhiaiuser: bool = True,
        tools: Sequence[str] = PREREQUISITES,
        kernel_headers: bool = True,
    ) -> SimRoot:
        sim = cls(root)
        for folder in ("etc", "usr/bin", "usr/sbin", "bin", "sbin", "dev", "run", "tmp", "var/log"):
            (sim.root / folder).mkdir(parents=True, exist_ok=True)
        passwd = "root:x:0:0:root:/root:/bin/bash\n"
        group = "root:x:0:\n"
        if hwhiaiuser:
            passwd += "HwHiAiUser:x:1000:1000::/home/HwHiAiUser:/bin/bash\n"
            group += "HwHiAiUser:x:1000:\n"
        (sim.root / "etc/passwd").write_text(passwd, encoding="utf-8")
        (sim.root / "etc/group").write_text(group, encoding="utf-8")
        for tool in tools:
            sim.add_tool(tool)
        if kernel_headers:
            (sim.root / f"lib/modules/{os.uname().release}/build").mkdir(parents=True, exist_ok=True)
        install_tools(sim.root)
        write_node_config(sim.root, name=name, index=index, npus=npus, model=model, faults=faults)
        return sim

    def path(self, node_path: str) -> Path:
        """Where a node path lives in the test root."""
        return self.root / node_path.lstrip("/")

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PROVISION_SIM_ROOT"] = str(self.root)
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
        env.pop("PYTHONPATH", None)
        env.update(extra or {})
        return env

    def add_tool(self, name: str, folder: str = "/usr/bin") -> None:
        tool = self.path(f"{folder}/{name}")
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        tool.chmod(0o755)

    def remove_tool(self, name: str) -> None:
        for folder in ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/sbin"):
            (self.root / folder / name).unlink(missing_ok=True)

    def run(
        self, argv: Sequence[str | Path], *, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a program of the host with the root's environment (e.g. a ``.run`` file)."""
        return subprocess.run(
            [str(a) for a in argv],
            env=self.env(),
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def tool(self, node_path: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run an installed python tool of the node (``/usr/local/bin/npu-smi``, ``.../hccn_tool``)."""
        return self.run([sys.executable, str(self.path(node_path)), *args], timeout=timeout)

    def engine(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python3 -m ascendsim ARGS`` with the node's engine."""
        env = self.env({"PYTHONPATH": str(self.path(ENGINE_DIR))})
        return subprocess.run(
            [sys.executable, "-B", "-m", "ascendsim", *args],
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def reboot(self) -> subprocess.CompletedProcess[str]:
        """A reboot as the node sees it: ``/run`` and ``/dev`` are fresh tmpfs, then the boot unit runs."""
        for folder in ("run", "dev"):
            shutil.rmtree(self.root / folder, ignore_errors=True)
            (self.root / folder).mkdir()
        return self.engine("boot", "--no-mount")

    def set_faults(self, faults: Mapping[str, object], *, replace: bool = False) -> None:
        set_faults(self.root, faults, replace=replace)

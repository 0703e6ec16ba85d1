"""Read-only bind mounts that let simulated nodes run the cached vLLM CPU engine at its host paths."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from provision.serving import engine
from provision.sim import rootfs


def engine_binds() -> list[str]:
    """``SRC:DST`` mounts for ``Cluster.up(binds=...)`` / ``provision sim up --bind-ro``.

    The engine cache and its interpreter's prefix (``engine_runtime_paths()``), plus host libraries that
    vLLM's native extension links against and the nodes' base system lacks (libnuma).
    """
    runtime = engine.engine_runtime_paths()
    binds = [f"{path}:{path}" for path in runtime]
    base = rootfs.ensure_base()
    site = next((engine.engine_venv() / "lib").glob("python3*/site-packages"))
    for library in sorted((site / "vllm").glob("_C*.so")):
        done = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=False)
        for match in re.finditer(r"=> (/\S+)", done.stdout):
            needed = Path(match.group(1))
            if any(needed.is_relative_to(path) for path in runtime):
                continue
            target = needed.resolve().parent / needed.name  # /lib -> /usr/lib on merged-/usr systems
            bind = f"{needed.resolve()}:{target}"
            if not (base / str(target).lstrip("/")).exists() and bind not in binds:
                binds.append(bind)
    return binds

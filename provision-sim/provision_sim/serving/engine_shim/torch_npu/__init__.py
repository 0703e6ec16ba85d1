"""torch_npu of the SIMULATED cluster's serving image (provision-sim), not Huawei's torch-npu.

The simulated nodes serve the vLLM CPU engine, whose venv has no torch-npu; the serving role's post-start
smoke asks inside the instance, as on an NPU server, ``python -c 'import torch, torch_npu;
print(torch.npu.device_count())'``. This module answers that from the simulated NPUs the process can see:
the ``/dev/davinciN`` nodes of its container (the pool's, given by the Ascend Docker Runtime or ``--device``),
narrowed to those ``ASCEND_RT_VISIBLE_DEVICES`` names when it is set. Only the serving image of
provision_sim.serving.image puts it on ``sys.path``; nothing of the product imports it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import types

# by name: the product's linters have no torch, the engine's Python that runs this has it
torch = importlib.import_module("torch")

__version__ = "0.0.0+provision.sim"


def _visible() -> list[int]:
    try:
        nodes = sorted(int(m.group(1)) for n in os.listdir("/dev") if (m := re.fullmatch(r"davinci(\d+)", n)))
    except OSError:
        nodes = []
    wanted = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "").strip()
    if not wanted:
        return nodes
    ids = [int(w) for w in re.split(r"[,\s]+", wanted) if w.isdigit()]
    return [i for i in ids if i in nodes]


def device_count() -> int:
    return len(_visible())


def is_available() -> bool:
    return device_count() > 0


npu = types.ModuleType("torch.npu")
setattr(npu, "device_count", device_count)  # noqa: B010  (a module built at run time)
setattr(npu, "is_available", is_available)  # noqa: B010
setattr(torch, "npu", npu)  # noqa: B010
sys.modules["torch.npu"] = npu

"""The NPU-Exporter binary of a local mirror, generated for the simulated nodes.

A site puts the ``npu-exporter`` binary of MindCluster's package (``Ascend-mindxdl-npu-exporter_<v>_linux-
<arch>.zip``) on its mirror beside the ``.run`` files, listed in ``sha256sums.txt``. The simulated one is a
single executable file too: a Python zip application (a ``#!/usr/bin/env python3`` line followed by a zip
holding the simulator's ``ascendsim`` engine), so on a node it needs only ``python3``, and it serves the
real exporter's endpoint from the node's simulated NPUs (``ascendsim/exporter.py``). Builds are
deterministic (fixed member times), so its sha256 changes only with the simulator's source.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from provision_sim.mirror.run_files import _engine_files

__all__ = ["EXPORTER_FILE", "build_exporter"]

EXPORTER_FILE = "npu-exporter"
_DATE = (2023, 11, 14, 22, 13, 20)  # fixed, as run_files' _MTIME
_MAIN = b"import sys\n\nfrom ascendsim import exporter\n\nsys.exit(exporter.main())\n"


def build_exporter(dest: Path) -> Path:
    """Write ``dest/npu-exporter`` (mode 0755); the caller refreshes ``sha256sums.txt``."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("__main__.py", _MAIN), *_engine_files()]:
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    path = dest / EXPORTER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"#!/usr/bin/env python3\n" + buf.getvalue())
    tmp.chmod(0o755)
    tmp.replace(path)
    return path

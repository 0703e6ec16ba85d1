"""``python3 -m ascendsim <tool> [args]``: npu-smi, hccn_tool, all_reduce_test, mpirun, npu-exporter, boot,
install, uninstall."""

from __future__ import annotations

import sys

from . import boot, exporter, hccl, hccn, installer, npusmi

TOOLS = {
    "npu-smi": npusmi.main,
    "hccn_tool": hccn.main,
    "all_reduce_test": hccl.main,
    "mpirun": hccl.mpirun,
    "npu-exporter": exporter.main,
    "boot": boot.main,
    "install": installer.main,
    "uninstall": installer.main,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in TOOLS:
        print(f"usage: python3 -m ascendsim {{{','.join(TOOLS)}}} [args]", file=sys.stderr)
        return 2
    return TOOLS[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())

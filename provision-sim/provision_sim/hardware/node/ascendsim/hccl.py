"""hccl_test's ``all_reduce_test`` and the ``mpirun`` that launches it, over the simulated NPU ports.

The command line is the documented one (hicann/oam-tools ``docs/zh/hccl_test/execution.md``, kept with
the result table in ``tests/fixtures/samples/hccl_test_outputs.txt``)::

    mpirun [-f hostfile | -hosts A,B] -n N [-ppn P] [-genv NAME VALUE]... all_reduce_test \\
        [-p npus] [-b minbytes] [-e maxbytes] [-f incfactor] [-o op] [-r root] [-d datatype] [-z 0/1] \\
        [-n iters] [-w warmup_iters] [-c 0/1]

and so is the output: the ``the minbytes is ...`` line, then the ``data_size(Bytes): | avg_time(us): |
alg_bandwidth(GB/s): | check_result:`` table with the sample's column widths, ``GB/s`` being data / time
in 2**30 bytes as in the sample.

The NPUs a rank uses are ``ASCEND_RT_VISIBLE_DEVICES`` (else 0 .. npus-1). Their ports follow the node's
fault knobs: ``link_slow`` (``{"3": 0.25}``: port 3 carries a quarter of its speed) scales the time, and a
port in ``link_down`` makes the collective fail with the RoCE error CQE line HCCL logs (the
``roce-error-cqe-ei0013`` sample of ``tests/fixtures/samples/ascend_fault_logs.txt``), exit 1.

``mpirun`` runs the program once, on this node, with the ``-genv`` variables: the simulator has no other
node to start ranks on, so a pair test measures the launching node's ports only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence

from . import common

PORT_GBPS = 200.0
"""An Atlas 800 A2 NPU port: 200GE (provision/data/hardware.yml, npu_port_gbps)."""
EFFICIENCY = 0.9
"""Share of the line rate an all-reduce reaches on a healthy port (RoCE headers, the protocol)."""
LATENCY_US = 20.0
UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}
NO_DEVICE = (
    "rtGetDeviceCount execute failed, reason=[driver error:no valid device]"
    "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]"
)


class Usage(Exception):
    pass


def _bytes(text: str) -> int:
    unit = UNITS.get(text[-1:].upper())
    try:
        return int(text[:-1]) * unit if unit else int(text)
    except ValueError:
        raise Usage(f"invalid size {text!r}") from None


def _options(argv: Sequence[str]) -> dict[str, str]:
    known = {"-p", "-b", "-e", "-f", "-o", "-r", "-d", "-z", "-n", "-w", "-c"}
    out: dict[str, str] = {}
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag not in known or not args:
            raise Usage(f"invalid option {flag!r}")
        out[flag] = args.pop(0)
    return out


def _factor(config: common.JsonDict, devices: Sequence[int]) -> float:
    slow = common.faults(config).get("link_slow") or {}
    return min([float(slow.get(str(d), 1.0)) for d in devices] or [1.0])


def all_reduce_test(argv: Sequence[str]) -> int:
    try:
        opts = _options(argv)
        low, high = _bytes(opts.get("-b", "64M")), _bytes(opts.get("-e", "64M"))
        step = int(opts.get("-f", "2"))
        iters, warmup = int(opts.get("-n", "20")), int(opts.get("-w", "5"))
    except (Usage, ValueError) as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    config = common.load_config()
    if config is None or common.loaded_driver() is None:
        sys.stderr.write(f"{NO_DEVICE}\n")
        return 1
    visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    npus = int(opts.get("-p", str(len(config["npus"]))))
    devices = [int(d) for d in visible.split(",")] if visible else list(range(npus))
    print(f"the minbytes is {low}, maxbytes is {high}, iters is {iters}, warmup_iters is {warmup}")
    sys.stdout.flush()
    down = {int(d) for d in common.faults(config).get("link_down") or []}
    if down & set(devices):
        stamp = time.strftime("%Y-%m-%d-%H:%M:%S") + ".000.000"
        sys.stderr.write(
            f"[ERROR] ROCE({os.getpid()},all_reduce_test):{stamp} [hns_roce_lite.c:630]"
            "hns_roce_lite_handle_error_cqe(630) : error cqe status: 0x15\n"
        )
        return 1
    rate = PORT_GBPS * 1e9 / 8 / 1e6 * EFFICIENCY * _factor(config, devices)  # bytes per microsecond
    print("data_size(Bytes): |   avg_time(us): | alg_bandwidth(GB/s): | check_result:")
    size = low
    while size <= high:
        avg = LATENCY_US + size / rate
        bandwidth = size / (avg / 1e6) / 2**30
        print(f"{size:<18}|{avg:>11.2f}    |{bandwidth:>14.5f}        | success")
        if step <= 1:
            break
        size *= step
    return 0


def mpirun(argv: Sequence[str] | None = None) -> int:
    """MPICH's launcher, reduced to this node: its options are read, the program runs once here."""
    env = dict(os.environ)
    args = list(sys.argv[1:] if argv is None else argv)
    size = "1"
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag == "-genv" and len(args) >= 2:
            name, value = args[0], args[1]
            env[name] = value
            del args[:2]
        elif flag in ("-n", "-np") and args:
            size = args.pop(0)
        elif flag in ("-f", "-hosts", "-hostfile", "-ppn") and args:
            args.pop(0)
        else:
            sys.stderr.write(f"mpirun: unrecognized argument {flag}\n")
            return 255
    if not args:
        sys.stderr.write("mpirun: no executable specified\n")
        return 255
    env.update(PMI_SIZE=size, PMI_RANK="0")
    return subprocess.run(args, env=env, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    return all_reduce_test(list(sys.argv[1:] if argv is None else argv))

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

``mpirun`` is MPICH's launcher as far as hccl_test uses it: ``-hosts A,B`` (or ``-f hostfile``), ``-n``,
``-ppn`` and ``-genv``; rank r runs on the host ``r // ppn`` of the list. A rank on another host is started
the way MPICH's Hydra starts it, over ``ssh -x`` (so, as on a real rack, the launching node's root needs
passwordless SSH to the others: ``provision sim mpi``). What the simulated ranks say to each other is the
simulator's own: each rank other than 0 checks its NPU ports and prints only ``ascendsim-link-factor F``
(F the share of line rate its ports carry), which ``mpirun`` keeps and hands to rank 0 in
``ASCENDSIM_PEER_LINK_FACTOR``; rank 0 prints the table at the slower end's speed. A rank that fails (a
port down, no driver, ssh refused) fails the whole run with what it printed on stderr, and ``mpirun``
exits with its code, as Hydra does.
"""

from __future__ import annotations

import os
import shlex
import socket
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
FACTOR_LINE = "ascendsim-link-factor"
PEER_FACTOR = "ASCENDSIM_PEER_LINK_FACTOR"
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
    own = min([float(slow.get(str(d), 1.0)) for d in devices] or [1.0])
    try:
        peer = float(os.environ.get(PEER_FACTOR, "1"))
    except ValueError:
        peer = 1.0
    return min(own, peer)


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
    rank0 = int(os.environ.get("PMI_RANK", "0") or 0) == 0
    if rank0:
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
    if not rank0:
        # not rank 0: the table is rank 0's to print; tell the launcher what this end's ports carry
        print(f"{FACTOR_LINE} {_factor(config, devices)}")
        return 0
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


def _local_names() -> set[str]:
    """The names and addresses Hydra starts ranks on without ssh: this host's."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname()}
    try:
        done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10, check=False)
        names.update(done.stdout.split())
    except OSError:
        pass
    return names


def _hosts(flag: str, value: str) -> list[str]:
    if flag == "-hosts":
        return [h for h in value.split(",") if h]
    try:
        with open(value, encoding="utf-8") as handle:  # hostfile: "host[:count]" a line
            return [line.split(":")[0].strip() for line in handle if line.strip() and line[0] != "#"]
    except OSError as exc:
        raise Usage(f"unable to open host file: {value} ({exc.strerror})") from None


def _rank(
    host: str, rank: int, size: int, genv: dict[str, str], program: list[str], local: bool
) -> subprocess.CompletedProcess[str]:
    env = {**genv, "PMI_RANK": str(rank), "PMI_SIZE": str(size)}
    if local:
        return subprocess.run(
            program, env={**os.environ, **env}, capture_output=rank != 0, text=True, check=False
        )
    remote = ["env", *(f"{k}={v}" for k, v in env.items()), *program]
    ssh = ["ssh", "-x", "-o", "BatchMode=yes", host, shlex.join(remote)]
    return subprocess.run(ssh, capture_output=True, text=True, check=False)


def mpirun(argv: Sequence[str] | None = None) -> int:
    """MPICH's launcher (Hydra), as far as hccl_test uses it; see the module's text."""
    args = list(sys.argv[1:] if argv is None else argv)
    genv: dict[str, str] = {}
    size, ppn, hosts = 1, 1, ["localhost"]
    try:
        while args and args[0].startswith("-"):
            flag = args.pop(0)
            if flag == "-genv" and len(args) >= 2:
                genv[args[0]] = args[1]
                del args[:2]
            elif flag in ("-n", "-np") and args:
                size = int(args.pop(0))
            elif flag == "-ppn" and args:
                ppn = max(1, int(args.pop(0)))
            elif flag in ("-f", "-hostfile", "-hosts") and args:
                hosts = _hosts(flag, args.pop(0)) or hosts
            else:
                raise Usage(f"unrecognized argument {flag}")
    except (Usage, ValueError) as exc:
        sys.stderr.write(f"mpirun: {exc}\n")
        return 255
    if not args:
        sys.stderr.write("mpirun: no executable specified\n")
        return 255
    local = _local_names()
    placed = [(rank, hosts[(rank // ppn) % len(hosts)]) for rank in range(size)]
    factors = []
    for rank, host in placed[1:]:
        done = _rank(host, rank, size, genv, args, host in local)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return done.returncode
        for line in done.stdout.splitlines():
            if line.startswith(FACTOR_LINE):
                factors.append(float(line.split()[1]))
            else:
                print(line)
    if factors:
        genv[PEER_FACTOR] = str(min(factors))
    rank0, host0 = placed[0]
    done = _rank(host0, rank0, size, genv, args, host0 in local)
    if host0 not in local:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
    return done.returncode


def main(argv: Sequence[str] | None = None) -> int:
    return all_reduce_test(list(sys.argv[1:] if argv is None else argv))

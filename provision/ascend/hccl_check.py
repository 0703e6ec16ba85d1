"""The bandwidth check of a multi-node group's NPU links, with the vendor's HCCL test tool (``hccl_test``).

Between two members of a group, NPU ``d`` of one and the NPU at the same position of the other (the same
rail) run a two-rank ``all_reduce_test``, one rank per node, launched by MPICH's ``mpirun`` as hccl_test's
documentation does (hicann/oam-tools ``docs/zh/hccl_test/execution.md``; the command line and the result
table are in ``tests/fixtures/samples/hccl_test_outputs.txt``). With one NPU per node the collective
crosses exactly one NPU network port on each side, so the figure belongs to that pair of ports; with two
ranks a ring all-reduce moves each byte once over the link, so the tool's ``alg_bandwidth`` (data / time)
is the link's bandwidth.

:func:`pair_argv` builds the command; :func:`link_figures` reads one run (the parser is
:func:`provision.ascend.hccn.parse_hccl_test`) and decides against a share of the port's nominal speed
(``npu_port_gbps`` of the NPU line in ``provision/data/hardware.yml``); :func:`figure_problems` words the
refusals like the HCCN gate's (:class:`provision.ascend.hccn_gate.Problem`); :func:`link_plan` is what a
group's head launches. The hccn_gate role runs them (``hccn_probe`` with ``links``); nothing here touches
a node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provision.ascend.hccn import parse_hccl_test
from provision.ascend.hccn_gate import Problem
from provision.ascend.npu_smi import ParseError

__all__ = [
    "HCCL_TEST_DIRS",
    "LinkRun",
    "figure_problems",
    "link_figures",
    "link_plan",
    "link_problems",
    "located",
    "nominal_gbs",
    "pair_argv",
]

HCCL_TEST_DIRS = (
    "/usr/local/Ascend/cann/tools/hccl_test",
    "/usr/local/Ascend/ascend-toolkit/latest/tools/hccl_test",
)
"""``${INSTALL_DIR}/tools/hccl_test`` of the active CANN toolkit (CANN 8.5 on, then up to 8.3); its ``bin/``
holds the tests once built (``make MPI_HOME=... ASCEND_DIR=...``)."""
TEST = "all_reduce_test"
MIN_BYTES = "8M"
MAX_BYTES = "64M"
"""Four sizes (8, 16, 32, 64 MiB, factor 2): large enough for the link, not its latency, to set the time;
the verdict reads the largest."""
PAIR_TIMEOUT_S = 150
"""A pair test that has not finished by then failed: HCCL gives up on a link it cannot set up after
``HCCL_CONNECT_TIMEOUT`` (120 s by default) and says why; a hang past that is a failure as well."""
LOCATE_SCRIPT = (
    'printf "mpirun=%s\\n" "$(command -v mpirun)"; for d in "$@"; do '
    'if [ -x "$d/bin/all_reduce_test" ]; then printf "dir=%s\\n" "$d"; break; fi; done'
)
"""Prints ``mpirun=PATH`` (empty when MPI is not installed) and ``dir=DIR``, the first of the arguments
holding a built ``bin/all_reduce_test`` (no line when none does)."""


def located(text: str) -> tuple[str | None, str | None]:
    """(mpirun, hccl_test folder) from :data:`LOCATE_SCRIPT`'s output; None where missing."""
    found = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return (found.get("mpirun") or None, found.get("dir") or None)


def pair_argv(test_dir: str, hosts: tuple[str, str], device: int) -> list[str]:
    """``mpirun`` running ``all_reduce_test`` on NPU ``device`` of each of the two ``hosts`` (addresses
    ``mpirun`` reaches them by): one process per node (``-ppn 1``), one NPU per process (``-p 1``), the
    NPU picked by CANN's ``ASCEND_RT_VISIBLE_DEVICES``; stopped after :data:`PAIR_TIMEOUT_S`."""
    return [
        "timeout",
        str(PAIR_TIMEOUT_S),
        "mpirun",
        "-hosts",
        ",".join(hosts),
        "-ppn",
        "1",
        "-n",
        "2",
        "-genv",
        "ASCEND_RT_VISIBLE_DEVICES",
        str(int(device)),
        f"{test_dir.rstrip('/')}/bin/{TEST}",
        "-b",
        MIN_BYTES,
        "-e",
        MAX_BYTES,
        "-f",
        "2",
        "-d",
        "fp32",
        "-o",
        "sum",
        "-p",
        "1",
    ]


def nominal_gbs(port_gbps: float) -> float:
    """A port's nominal speed (Gbit/s) in the tool's unit: its ``GB/s`` is data / time in 2**30 bytes
    (the documented sample: 67108864 bytes in 2630.20 us is its 23.76245)."""
    return port_gbps * 1e9 / 8 / 2**30


@dataclass(frozen=True, slots=True)
class LinkRun:
    """One pair test: ``host``'s NPU ``device`` and ``peer``'s NPU ``peer_device``; the tool's exit code
    and what it printed (stdout, then stderr)."""

    host: str
    device: int
    peer: str
    peer_device: int
    rc: int
    output: str

    @property
    def pair(self) -> str:
        # NPU d's network port is the tool's eth<d> (hccn_tool -gateway -g: "Iface:eth<d>")
        return (
            f"{self.host} NPU {self.device} (port eth{self.device}) <-> "
            f"{self.peer} NPU {self.peer_device} (port eth{self.peer_device})"
        )


SSH_FAILURES = (
    "Permission denied (publickey",
    "Host key verification failed",
    "Could not resolve hostname",
    "Connection refused",
    "Connection timed out",
    "No route to host",
)
"""OpenSSH's own words when MPICH's launcher (Hydra starts the other ranks over ssh) cannot reach a node:
the link was not measured, the launch failed."""
LAUNCH_FIX = (
    "hccl_test's launcher (MPICH's Hydra) starts the peer's rank over ssh: give the head's root "
    "passwordless SSH to every member (its key in their authorized_keys, their host keys in its "
    "known_hosts), or set hccn_gate_link_threshold: 0 to leave the links unmeasured"
)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def link_figures(run: LinkRun, port_gbps: float | None, threshold: float) -> dict[str, Any]:
    """What one pair test measured, as plain data for the run's ``--json``: ``host``, ``device``,
    ``peer``, ``peer_device``, ``data_size`` and ``bandwidth_gbs`` (the largest size's row),
    ``nominal_gbs`` and ``floor_gbs`` (``threshold`` of it; None without a nominal speed), ``ok`` and
    ``problem`` (None when ok)."""
    nominal = nominal_gbs(port_gbps) if port_gbps else None
    floor = nominal * threshold if nominal is not None else None
    figures: dict[str, Any] = {
        "host": run.host,
        "device": run.device,
        "peer": run.peer,
        "peer_device": run.peer_device,
        "data_size": None,
        "bandwidth_gbs": None,
        "nominal_gbs": None if nominal is None else round(nominal, 3),
        "floor_gbs": None if floor is None else round(floor, 3),
        "ok": False,
        "problem": None,
    }
    rows = []
    with contextlib.suppress(ParseError):  # no table: the failure below says what the tool said
        rows = parse_hccl_test(run.output)
    if run.rc != 0 or not rows:
        last_line = _last_line(run.output)
        if any(phrase in run.output for phrase in SSH_FAILURES):
            figures["launch_failed"] = True
            figures["problem"] = f"mpirun could not start the rank on {run.peer} (exit {run.rc}): {last_line}"
        else:
            figures["problem"] = f"hccl_test failed (exit {run.rc}): {last_line}"
        return figures
    last = max(rows, key=lambda row: row.data_size)
    figures.update(data_size=last.data_size, bandwidth_gbs=last.alg_bandwidth_gbs)
    failed = [row.data_size for row in rows if row.check_result == "failed"]
    if failed:
        figures["problem"] = f"hccl_test check_result failed at {', '.join(map(str, failed))} bytes"
    elif floor is not None and last.alg_bandwidth_gbs < floor:
        figures["problem"] = (
            f"{last.alg_bandwidth_gbs:g} GB/s at {last.data_size} bytes, below {threshold:.0%} of the "
            f"port's nominal {port_gbps:g} Gbit/s ({floor:.2f} GB/s)"
        )
    figures["ok"] = figures["problem"] is None
    return figures


def figure_problems(figures: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """The reasons to refuse a group from its pair tests' figures (:func:`link_figures`): one per pair that
    failed or fell below the floor, naming both nodes, NPUs and ports."""
    problems = []
    for found in figures:
        if found.get("ok"):
            continue
        run = LinkRun(
            str(found["host"]), int(found["device"]), str(found["peer"]), int(found["peer_device"]), 0, ""
        )
        problems.append(
            Problem(
                run.host,
                f"link to {run.peer} NPU {run.peer_device}: {found.get('problem')}",
                run.device,
                f"{TEST} between {run.pair}",
                LAUNCH_FIX
                if found.get("launch_failed")
                else "check both ports (hccn_tool -i N -link -g, -link_stat -g, -optical -g), their cables "
                "and the switch ports between the two nodes",
            )
        )
    return problems


def link_problems(
    runs: Iterable[LinkRun], port_gbps: float | None, threshold: float
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Every pair test's figures (:func:`link_figures`) and the reasons to refuse
    (:func:`figure_problems`)."""
    figures = [link_figures(run, port_gbps, threshold) for run in runs]
    return figures, figure_problems(figures)


def link_plan(group: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pair tests the head of ``group`` (``group_dict``) launches: its NPU at each position with the
    NPU at the same position of every other member (the same rail), mpirun reaching the two nodes by their
    inventory addresses."""
    head, *others = group["members"]
    plan = []
    for member in others:
        for device, peer_device in zip(head["devices"], member["devices"], strict=False):
            plan.append(
                {
                    "device": int(device),
                    "peer": str(member["host"]),
                    "peer_device": int(peer_device),
                    "hosts": [str(head["address"]), str(member["address"])],
                }
            )
    return plan


def runs_from(entries: Iterable[Mapping[str, Any]]) -> list[LinkRun]:
    """:class:`LinkRun` of plain dicts (``host``, ``device``, ``peer``, ``peer_device``, ``rc``,
    ``output``), as a probe returns them."""
    return [
        LinkRun(
            str(e["host"]),
            int(e["device"]),
            str(e["peer"]),
            int(e["peer_device"]),
            int(e["rc"]),
            str(e.get("output") or ""),
        )
        for e in entries
    ]

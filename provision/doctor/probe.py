"""What ``provision doctor`` asks a node: one read-only shell command, parsed here on the controller.

The command joins four scripts the house already has or keeps here, each printing labelled sections
(:data:`provision.ascend.facts.SECTION_FUNCTION`):

* the facts probe (:data:`provision.ascend.facts.PROBE_SCRIPT`): PCI view, ``npu-smi info``, the driver
  and firmware ``version.info``, ``/etc/ascend_install.info``, free disk;
* the HCCN probe of the serving gate (:data:`provision.ascend.hccn_gate.PROBE_SCRIPT`): link, net health,
  address and TLS switch of every NPU port;
* :data:`DOCTOR_SCRIPT`: OS, kernel, device nodes, CANN install info, provision's local facts and
  converged record, docker's ``daemon.json``, the state of docker and of every vLLM unit and a window of
  each one's journal (its first error block with context, then its last lines), the containers, DKMS, the
  NPU driver's kernel lines (of the boot and of the last hours), the newest engine plog and the error
  lines of the newest plogs, and the up/down records of every NPU port (``hccn_tool -link_stat -g``).
  Every part is bounded (lines and characters per line).

``since_s`` (``provision doctor --since``) bounds the logs to that many last seconds: the journals
(``journalctl --since``), the kernel lines of the last hours (those of the boot stay: they tell how the
running driver loaded), the plogs (files written in the window) and, on the controller, the ports' link
records (against the ``current time`` the tool prints).

Nothing on the node is changed; every command only reads (the per-port questions, asked of every NPU at
once, answer into a scratch folder of mktemp that is removed again). :func:`collect` turns the text into
plain data (JSON-able) with the house's parsers; the raw text is kept for the support bundle.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from provision.ascend import hccn_gate
from provision.ascend.facts import MARK, PROBE_SCRIPT, facts_from_probe, sections
from provision.ascend.hccn import parse_hccn_link_stat
from provision.ascend.npu_smi import ParseError
from provision.ascend.versions import parse_cann_install_info
from provision.paths import FACT_DIR, LINKS_PATH, RECORD_PATH
from provision.scripts import node_script
from provision.systemd import parse_show, parse_show_units

DISK_PATHS = ("/", "/usr/local", "/var", "/var/lib/docker", "/tmp")
"""Where the roles write: the driver and CANN under /usr/local, images and logs under /var."""
JOURNAL_LINES = 40
UNIT_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "MainPID",
    "NRestarts",
    "Result",
    "UnitFileState",
)
DKMS_TREE = "/var/lib/dkms/davinci_ascend"
"""The DKMS tree the driver installer builds its kernel modules in (the ascend_driver role's
``_ascend_driver_dkms_tree``)."""
PLOG_DIR = "/root/ascend/log/debug/plog"
"""Where the CANN runtime of an engine run as root writes its plog files."""
JOURNAL_SCAN = 5000
"""How many of a unit's last journal lines are searched for their first error block."""
ERROR_BEFORE, ERROR_AFTER = 10, 60
"""Lines kept before and after the first error line of a unit's journal."""
ERROR_LINE = r"Traceback \(most recent call last\)|ERROR|\[Error\]|E[A-Z][0-9][0-9][0-9][0-9]"
"""What starts an error block: Python's traceback, vLLM's and CANN's ERROR lines, CANN's error codes
(EI0006, EZ9999, EL0004...). POSIX ERE: the node's awk reads it."""
ERROR_KEEP = 20
"""Error lines kept from between the first error block and the last lines (the last of them): the first
error of the scan may be an older run's, and the decisive line of the last failure sits after it."""
WINDOW_GAP = (
    "[provision doctor: lines between the first error block and the last lines left out, their last "
    "error lines kept]"
)
LINE_CHARS = 2000
"""Every collected log line is cut at this many characters (one plog line can hold a whole table)."""
KERNEL_HOURS = 6
KERNEL_LINES = 200
"""Kernel lines kept from the start of the boot, and from the last KERNEL_HOURS hours."""
KERNEL_FILTER = r"davinci|devdrv|drv_|devmm|hisi_hdc|ascend|(^|[^a-z])npu"
"""The NPU driver's names in kernel lines: its device nodes (/dev/davinciN, devmm_svm, hisi_hdc), its
modules (drv_pcie_host, drv_devmng_host, drv_devmm_host, drv_hdc_host), its PCI driver
(devdrv_device_driver); "npu" as a word start (not the "input:" lines of every boot). No public capture of
the driver's kernel messages was found: this keeps every line naming it rather than guessing at its
message formats."""
PLOG_FILES = 3
PLOG_ERROR_LINES = 100
PLOG_ERROR = r"^\[ERROR\]|E[A-Z][0-9][0-9][0-9][0-9]"
"""The first error lines (``[ERROR] HCCL(...)``, CANN error codes) of each of the newest PLOG_FILES plogs."""

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SINCE = re.compile(r"^\s*(\d+)\s*([smhd])\s*$", re.IGNORECASE)


def parse_since(text: str) -> int:
    """``30m``, ``6h``, ``2d``, ``90s`` -> seconds above 0; ValueError saying what is accepted."""
    m = _SINCE.match(text)
    seconds = int(m.group(1)) * SINCE_UNITS[m.group(2).lower()] if m else 0
    if seconds <= 0:
        raise ValueError("give a duration above 0 as a number and a unit s, m, h or d (e.g. 30m, 6h, 2d)")
    return seconds


# Positional arguments: the number of journal lines, the window in seconds (0: none), the hccn_tool path and
# the NPU ids whose link records to read. Read-only; each part tolerates a missing tool.
DOCTOR_SCRIPT = node_script(
    "doctor_probe.sh",
    JOURNAL_LINES=str(JOURNAL_LINES),
    FACT_DIR=FACT_DIR,
    RECORD_PATH=RECORD_PATH,
    LINKS_PATH=LINKS_PATH,
    UNIT_PROPERTIES=" ".join(f"-p {p}" for p in UNIT_PROPERTIES),
    DKMS_TREE=DKMS_TREE,
    PLOG_DIR=PLOG_DIR,
    JOURNAL_SCAN=str(JOURNAL_SCAN),
    ERROR_BEFORE=str(ERROR_BEFORE),
    ERROR_AFTER=str(ERROR_AFTER),
    ERROR_KEEP=str(ERROR_KEEP),
    ERROR_AWK=ERROR_LINE.replace("/", "\\/"),
    WINDOW_GAP=WINDOW_GAP,
    LINE_CHARS=str(LINE_CHARS),
    KERNEL_HOURS=str(KERNEL_HOURS),
    KERNEL_LINES=str(KERNEL_LINES),
    KERNEL_FILTER=KERNEL_FILTER,
    PLOG_FILES=str(PLOG_FILES),
    PLOG_ERROR_LINES=str(PLOG_ERROR_LINES),
    PLOG_ERROR=PLOG_ERROR,
)

# Second command, only when npu-smi lists processes: which unit each one belongs to.
HOLDERS_SCRIPT = node_script("doctor_holders.sh")


def probe_command(
    devices: Sequence[int], *, journal_lines: int = JOURNAL_LINES, since_s: int | None = None
) -> str:
    """The node command: the facts probe, the HCCN probe of ``devices`` and :data:`DOCTOR_SCRIPT` (logs of
    the last ``since_s`` seconds only, when given)."""
    window = [str(int(journal_lines)), str(int(since_s or 0)), hccn_gate.DEFAULT_TOOL]
    parts = [
        shlex.join(["sh", "-c", PROBE_SCRIPT, "ascend-probe", *DISK_PATHS]),
        shlex.join(["sh", "-c", DOCTOR_SCRIPT, "doctor-probe", *window, *(str(int(d)) for d in devices)]),
    ]
    if devices:
        argv = hccn_gate.probe_argv(hccn_gate.DEFAULT_TOOL, devices=devices)
        parts.append(shlex.join(["sh", "-c", hccn_gate.PROBE_SCRIPT, "hccn-probe", *argv]))
    return "; ".join(parts)


def holders_command(pids: Sequence[int]) -> str:
    return shlex.join(["sh", "-c", HOLDERS_SCRIPT, "npu-holders", *(str(int(p)) for p in pids)])


def npu_pids(probe_text: str) -> list[int]:
    """The host PIDs ``npu-smi info`` lists as running on an NPU (for :func:`holders_command`)."""
    facts = ascend_facts(probe_text)["ascend_npus"]
    return sorted({int(p) for chip in facts["chips"] for p in chip["processes"]})


def ascend_facts(text: str) -> dict[str, Any]:
    """The facts probe's facts; an ``npu-smi info`` output its parser cannot read becomes the NPUs'
    ``npu_smi_error`` instead of hiding everything else the node showed."""
    try:
        return facts_from_probe(text)
    except ParseError as exc:
        kept = "".join(
            f"\n{MARK}{label}\n{body}\n" for label, body in sections(text) if not label.startswith("npu-smi")
        )
        facts = facts_from_probe(kept)
        facts["ascend_npus"]["npu_smi_error"] = f"unreadable npu-smi output: {exc}"
        return facts


def collect(text: str, holders: str = "") -> dict[str, Any]:
    """Everything the probe printed, as plain data::

    {"os": {...os-release}, "kernel": "5.10.0", "arch": "aarch64", "npus": {...ascend_npus},
     "disk_free_mb": {path: MiB}, "npu_smi": "raw text" | None, "devnodes": [...],
     "cann": {"toolkits": ["9.1.0"]}, "facts": {name: fact}, "record": {...} | None,
     "daemon_json": {...} | None | "unreadable: ...", "units": {unit: {ActiveState, ...}},
     "journals": {unit: [lines]},
     "containers": {name: {"id", "status"}}, "dkms": "raw" | None, "dkms_builds": ["1.0/5.10.0"] | None,
     "dkms_make_log": [lines], "plog": {"path", "lines"} | None, "plog_errors": {path: [lines]},
     "kernel_log": [lines], "hccn": {...hccn_gate.parse_probe},
     "link_stats": {npu: {"current_time", "link_up_count", "records": [[time, "LINK UP"|"LINK DOWN"]]}},
     "links": {"age_s", "threshold", "links": [figures]} | "unreadable: ..." | None,
     "since_s": seconds | None, "holders": {pid: unit | None}}
    """
    found = sections(text)
    labelled = dict(found)
    ascend = ascend_facts(text)
    out: dict[str, Any] = {
        "os": _os_release(labelled.get("os", "")),
        "kernel": None,
        "arch": None,
        "npus": ascend["ascend_npus"],
        "disk_free_mb": ascend["ascend_disk_free_mb"],
        "npu_smi": next((body for label, body in found if label.startswith("npu-smi /")), None),
        "devnodes": labelled.get("devnodes", "").split(),
        "cann": {"toolkits": []},
        "facts": {},
        "record": None,
        "daemon_json": None,
        "units": {},
        "journals": {},
        "containers": {},
        "dkms": labelled.get("dkms"),
        "dkms_builds": None,
        "dkms_make_log": labelled.get("dkms-make.log", "").splitlines(),
        "plog": None,
        "plog_errors": {},
        "kernel_log": [],
        "hccn": hccn_gate.parse_probe(text),
        "link_stats": {},
        "links": None,
        "since_s": None,
        "holders": {},
    }
    words = labelled.get("uname", "").split()
    if len(words) >= 3:
        out["kernel"], out["arch"] = words[1], words[2]
    toolkits: set[str] = set()
    for label, body in found:
        kind, _, rest = label.partition(" ")
        if kind == "toolkit":
            try:
                toolkits.add(parse_cann_install_info(body).version)
            except ParseError:
                continue
        elif kind == "fact":
            out["facts"][rest] = _json(body)
        elif kind == "journal":
            out["journals"][rest] = [
                _ANSI.sub("", line).rstrip() for line in body.splitlines() if line.strip()
            ]
        elif kind == "plog":
            out["plog"] = {"path": rest, "lines": body.splitlines()}
        elif kind == "plog-errors":
            out["plog_errors"][rest] = [line for line in body.splitlines() if line.strip()]
        elif kind == "kernel":
            out["kernel_log"] += [line for line in body.splitlines() if line.strip()]
        elif kind == "link_stat" and rest.isdigit():
            try:
                stat = parse_hccn_link_stat(body)
            except ParseError:
                continue  # an old tool without -link_stat: no records to judge
            out["link_stats"][rest] = {
                "current_time": stat.current_time,
                "link_up_count": stat.link_up_count,
                "records": [list(r) for r in stat.records],
            }
        elif kind == "links":
            out["links"] = _links(rest, body)
        elif kind == "window" and body.strip().isdigit() and int(body) > 0:
            out["since_s"] = int(body)
    out["cann"]["toolkits"] = sorted(toolkits)
    if "record" in labelled:
        out["record"] = _json(labelled["record"])
    if "daemon.json" in labelled:
        out["daemon_json"] = _json(labelled["daemon.json"])
    if "show" in labelled:
        out["units"] = parse_show_units(labelled["show"])
    for line in labelled.get("containers", "").splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2:
            out["containers"][parts[1]] = {"id": parts[0], "status": parts[2] if len(parts) > 2 else ""}
    if "dkms-tree" in labelled:
        root = DKMS_TREE + "/"
        out["dkms_builds"] = [
            p.removeprefix(root) for p in labelled["dkms-tree"].split() if p.startswith(root)
        ]
    for label, body in sections(holders):
        kind, _, pid = label.partition(" ")
        if kind == "cgroup" and pid.isdigit():
            out["holders"][pid] = hccn_gate.unit_of_cgroup(body)
    return out


def _links(age: str, body: str) -> dict[str, Any] | str:
    """The HCCN gate's record of the measured links (:data:`LINKS_PATH`) with its age, or why it cannot be
    read."""
    record = _json(body)
    if not isinstance(record, dict) or not isinstance(record.get("links"), list):
        return record if isinstance(record, str) else f"unreadable: {LINKS_PATH} holds no list of links"
    return {
        "age_s": int(age) if age.lstrip("-").isdigit() else None,
        "threshold": record.get("threshold"),
        "links": [link for link in record["links"] if isinstance(link, dict)],
    }


def _os_release(text: str) -> dict[str, str]:
    return {key: value.strip("\"'") for key, value in parse_show(text).items()}


def _json(text: str) -> Any:
    """A JSON file's content, or ``"unreadable: ..."`` (a broken daemon.json is a finding, not a crash)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        return f"unreadable: {exc}"

"""``provision sim fault``: plant a fault on a node, and take it away again, to rehearse what it looks like.

Two kinds of knob, one list (the ``faults`` of the node's ``hardware.json``, so ``sim fault NODE`` shows
every fault a node has):

* the simulated hardware's knobs (:data:`provision_sim.hardware.KNOBS`): npu-smi and hccn_tool read them on
  every call, so setting one is all it takes;
* :data:`NODE_KNOBS`: faults that live in the node itself, planted the way they happen on a server — a
  process outside provision holding an NPU (a real process, shown in npu-smi's process table), a driver
  other than the lock's (its ``version.info`` rewritten, as a hand install leaves it), a nearly full
  ``/tmp``, a missing device node, a port that went down and came back (``hccn_tool -link_stat -g``
  records it), an HCCL execution timeout in the engine's journal. Clearing one undoes what planting it did.

The log lines a knob plants are real ones (:data:`HCCL_TIMEOUT_LINE`, verbatim from a public report and
kept in ``tests/fixtures/samples/ascend_fault_logs.txt``); the simulator makes up none.

A stopped docker or vLLM unit needs no knob: it is ``systemctl stop docker.socket docker.service`` on the
node, as on a server (and ``systemctl start`` to end it).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import InputError, ProvisionError
from provision_sim import hardware, nodes
from provision_sim.hardware import KNOBS, Knob
from provision_sim.nodes import Node

DRIVER_VERSION_INFO = "/usr/local/Ascend/driver/version.info"
SAVED = "/var/lib/provision-sim/faults"
"""Where a node keeps what a planted fault replaced (inside the node)."""
FOREIGN_UNIT = "provision-sim-foreign-npu{chip}.service"
FOREIGN_MEMORY_MB = 512
TMP_FULL_SOURCE = "provision-sim-tmp-full"
TMP_FULL_SIZE_MB = 128
TMP_FULL_FREE_MB = 32
"""Nearly full, not full: what a tool writes to /tmp in passing (a probe's scratch files) still fits."""
HIDDEN_DEVNODE = "/dev/.provision-sim-hidden-davinci{chip}"
TEXT_KNOBS = ("driver_version",)
"""Knobs whose VALUE may be plain text (``driver_version=24.1.rc2``) rather than JSON."""
HCCL_TIMEOUT_SOURCE = "https://github.com/vllm-project/vllm-ascend/issues/3413"
HCCL_TIMEOUT_LINE = (
    "EI0002: [PID: 2969] 2025-10-11-15:09:34.713.335 The wait execution of the Notify register times out. "
    "Reason: The Notify register has not received the Notify record from remote rank: [24]. "
    "base information: "
    "[streamID:[109], taskID[38], taskType[Notify Wait], "
    "tag[AllReduce_group_name_1654NHRAllReduceComm_device], "
    "AlgType(level 0-1-2):[ring-NHR-NHR].]. task information: [notify id:[0x0000000000000213], stage:[0], "
    "remote rank:[24]]. group information: [group:[group_name_1654], user define information[Unspecified], "
    "rankSize[32], rankId[25 24]]"
)
"""An HCCL execution timeout as vLLM-Ascend's engine printed it (:data:`HCCL_TIMEOUT_SOURCE`)."""
SERVE_CONFIG_DIR = "/etc/provision/serve"
"""The vllm_serve role's vllm_serve_config_dir: one folder per pool the node serves (its env, args)."""
JOURNAL_SOCKET = "/run/systemd/journal/socket"
# journald's native protocol, root only: `journalctl -u UNIT` shows an entry with OBJECT_SYSTEMD_UNIT=UNIT
# from uid 0 among the unit's own lines, so the line reads as the engine's output.
JOURNAL_WRITE = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "for unit in sys.argv[2:]:\n"
    "    s.sendto(('MESSAGE=%s\\nPRIORITY=3\\nSYSLOG_IDENTIFIER=vllm\\nOBJECT_SYSTEMD_UNIT=%s\\n'"
    " % (sys.argv[1], unit)).encode(), '" + JOURNAL_SOCKET + "')\n"
)
LOST_AT_BOOT = ("tmp_full", "devnode_missing")
"""Node knobs a boot undoes (a fresh /dev, no mount over /tmp)."""


def _driver_version(value: object) -> object:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"give a driver version such as 24.1.rc2, not {value!r}")
    return value


def _chips(value: object) -> object:
    return KNOBS["link_down"].check(value)


NODE_KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "foreign_process",
            "'[5]'",
            "a real process outside provision's units holds chip 5 (npu-smi lists it)",
            _chips,
        ),
        Knob(
            "driver_version",
            "24.1.rc2",
            f"{DRIVER_VERSION_INFO} says another driver than the lock's",
            _driver_version,
        ),
        Knob(
            "tmp_full",
            "",
            f"/tmp nearly full: a {TMP_FULL_SIZE_MB} MiB tmpfs over it, {TMP_FULL_FREE_MB} MiB free",
            lambda v: KNOBS["disk_full"].check(v),
            True,
        ),
        Knob("devnode_missing", "'[7]'", "/dev/davinci7 is gone (the driver did not create it)", _chips),
        Knob(
            "link_flap",
            "'[3]'",
            "NPU 3's port went down for 2 s and came back: UP, but hccn_tool -link_stat -g records it",
            _chips,
        ),
        Knob(
            "hccl_timeout",
            "",
            "the journal of every pool's engine (vllm-POOL.service) gets a real HCCL execution timeout "
            "(EI0002, remote rank 24); "
            "clearing it rotates and vacuums the node's journal (journald forgets no single line)",
            lambda v: KNOBS["disk_full"].check(v),
            True,
        ),
    )
}
ALL_KNOBS: dict[str, Knob] = {**KNOBS, **NODE_KNOBS}


def describe() -> str:
    """The knobs for ``--help``: name, example, what it does."""
    return "\n".join(f"{k.name}{'=' + k.example if k.example else ''}: {k.does}" for k in ALL_KNOBS.values())


def parse(words: Sequence[str]) -> dict[str, object]:
    """``["dcmi_error=-8005", "link_down=[5]", "disk_full"]`` → checked knob values; InputError otherwise."""
    out: dict[str, object] = {}
    for word in words:
        name, has_value, text = word.partition("=")
        knob = ALL_KNOBS.get(name)
        if knob is None:
            raise InputError(f"unknown fault knob {name!r}; known: {', '.join(ALL_KNOBS)}")
        if not has_value:
            if knob.default is None:
                raise InputError(f"{name} needs a value, e.g. {name}={knob.example}")
            value: object = knob.default
        else:
            try:
                value = json.loads(text)
            except ValueError as exc:
                if name not in TEXT_KNOBS:
                    raise InputError(
                        f"{name}={text}: not JSON ({exc}); e.g. {name}={knob.example or 'true'}"
                    ) from None
                value = text
        try:
            out[name] = knob.check(value)
        except ValueError as exc:
            raise InputError(f"{name}: {exc} (e.g. {name}={knob.example or 'true'})") from None
    return out


def _root(node: Node) -> Path:
    """Where the node's files are from the host: its mounted root, or its upper layer when unmounted."""
    return node.root if nodes.mounted(node) else node.upper


def current(node: Node) -> dict[str, Any]:
    path = _root(node) / hardware.HW_CONFIG.lstrip("/")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProvisionError(f"{node.name} has no simulated hardware ({path})") from None
    faults = config.get("faults") or {}
    return dict(faults) if isinstance(faults, dict) else {}


def _exec(node: Node, script: str) -> str:
    done = nodes.exec_in(node, ["sh", "-c", script], timeout=60)
    if done.returncode != 0:
        raise ProvisionError(f"{node.name}: {script}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _running(node: Node, knob: str) -> None:
    if nodes.init_process(node) is None:
        raise ProvisionError(f"{knob} needs {node.name} running (`provision sim power {node.name} on`)")


# -- node knobs: plant / clear ------------------------------------------------------------------------


def _plant_foreign(node: Node, chips: list[int], faults: dict[str, Any]) -> None:
    _running(node, "foreign_process")
    _clear_foreign(node, faults)
    held: dict[str, list[dict[str, int]]] = dict(faults.get("npu_processes") or {})
    for chip in chips:
        unit = FOREIGN_UNIT.format(chip=chip)
        # python3 as a stray engine would be (npu-smi names a process by its executable)
        _exec(
            node,
            f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null; "
            f"systemd-run --quiet --unit={unit} --description='not provision: holds NPU chip {chip}' "
            "python3 -c 'import time; time.sleep(10**9)'",
        )
        pid = int(_exec(node, f"systemctl show -P MainPID {unit}").strip() or 0)
        if pid <= 0:
            raise ProvisionError(f"{node.name}: {unit} did not start")
        held[str(chip)] = [*held.get(str(chip), []), {"pid": pid, "memory_mb": FOREIGN_MEMORY_MB}]
    faults["npu_processes"] = held
    faults["foreign_process"] = chips


def _clear_foreign(node: Node, faults: dict[str, Any]) -> None:
    chips = faults.pop("foreign_process", None) or []
    if not chips:
        return
    held: dict[str, list[dict[str, int]]] = dict(faults.get("npu_processes") or {})
    if nodes.init_process(node) is not None:
        for chip in chips:
            unit = FOREIGN_UNIT.format(chip=chip)
            pid = _exec(node, f"systemctl show -P MainPID {unit}").strip()
            _exec(node, f"systemctl stop {unit} 2>/dev/null || true")
            held[str(chip)] = [p for p in held.get(str(chip), []) if str(p.get("pid")) != pid]
    for chip in chips:  # a stopped node: its processes are gone anyway
        if not held.get(str(chip)) or nodes.init_process(node) is None:
            held.pop(str(chip), None)
    if held:
        faults["npu_processes"] = held
    else:
        faults.pop("npu_processes", None)


def _plant_driver_version(node: Node, version: str, faults: dict[str, Any]) -> None:
    info = _root(node) / DRIVER_VERSION_INFO.lstrip("/")
    saved = _root(node) / SAVED.lstrip("/") / "driver-version.info"
    if not info.is_file():
        raise ProvisionError(
            f"{node.name} has no driver installed ({DRIVER_VERSION_INFO}): nothing to change"
        )
    if not saved.exists():
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(info.read_bytes())
    lines = saved.read_text(encoding="utf-8").splitlines()
    info.write_text(
        "".join(f"Version={version}\n" if line.startswith("Version=") else f"{line}\n" for line in lines),
        encoding="utf-8",
    )
    faults["driver_version"] = version


def _clear_driver_version(node: Node, faults: dict[str, Any]) -> None:
    faults.pop("driver_version", None)
    saved = _root(node) / SAVED.lstrip("/") / "driver-version.info"
    if saved.exists():
        (_root(node) / DRIVER_VERSION_INFO.lstrip("/")).write_bytes(saved.read_bytes())
        saved.unlink()


def _plant_tmp_full(node: Node, _value: object, faults: dict[str, Any]) -> None:
    _running(node, "tmp_full")
    _clear_tmp_full(node, faults)
    _exec(
        node,
        f"mount -t tmpfs -o size={TMP_FULL_SIZE_MB}m,mode=1777 {TMP_FULL_SOURCE} /tmp && "
        f"dd if=/dev/zero of=/tmp/.provision-sim-full bs=1M count={TMP_FULL_SIZE_MB - TMP_FULL_FREE_MB} "
        "2>/dev/null",
    )
    faults["tmp_full"] = True


def _clear_tmp_full(node: Node, faults: dict[str, Any]) -> None:
    faults.pop("tmp_full", None)
    if nodes.init_process(node) is not None:
        _exec(node, f"while findmnt -n -o SOURCE /tmp | grep -qx {TMP_FULL_SOURCE}; do umount /tmp; done")


def _plant_devnode_missing(node: Node, chips: list[int], faults: dict[str, Any]) -> None:
    _running(node, "devnode_missing")
    _clear_devnode_missing(node, faults)
    for chip in chips:
        hidden = HIDDEN_DEVNODE.format(chip=chip)
        _exec(node, f"mv /dev/davinci{chip} {shlex.quote(hidden)}")
    faults["devnode_missing"] = chips


def _clear_devnode_missing(node: Node, faults: dict[str, Any]) -> None:
    chips = faults.pop("devnode_missing", None) or []
    if nodes.init_process(node) is None:
        return
    for chip in chips:
        hidden = shlex.quote(HIDDEN_DEVNODE.format(chip=chip))
        _exec(node, f"if [ -e {hidden} ]; then mv {hidden} /dev/davinci{chip}; fi")


def _plant_link_flap(node: Node, chips: list[int], faults: dict[str, Any]) -> None:
    # the time it went down: hccn_tool prints its records from it
    faults["link_flap"] = {str(chip): round(time.time(), 3) for chip in chips}


def _clear_link_flap(node: Node, faults: dict[str, Any]) -> None:
    faults.pop("link_flap", None)


def _plant_hccl_timeout(node: Node, _value: object, faults: dict[str, Any]) -> None:
    _running(node, "hccl_timeout")
    # the engines only: vllm-serve-ready.service (the readiness endpoint) is no pool's
    units = _exec(
        node,
        f"for f in {SERVE_CONFIG_DIR}/*/env; do p=${{f%/env}}; u=vllm-${{p##*/}}.service; "
        '[ -f "$f" ] && [ -f "/etc/systemd/system/$u" ] && echo "$u"; done; true',
    ).split()
    if not units:
        raise ProvisionError(f"{node.name} serves no pool ({SERVE_CONFIG_DIR}/POOL/env): no engine journal")
    script = shlex.join(["python3", "-c", JOURNAL_WRITE, HCCL_TIMEOUT_LINE, *units])
    _exec(node, script)
    faults["hccl_timeout"] = units


def _clear_hccl_timeout(node: Node, faults: dict[str, Any]) -> None:
    if faults.pop("hccl_timeout", None) and nodes.init_process(node) is not None:
        # archived journal files older than a second go: every line written before the rotation
        _exec(node, "journalctl --rotate && sleep 1.1 && journalctl --vacuum-time=1s >/dev/null 2>&1")


Plant = Callable[[Node, Any, dict[str, Any]], None]
Clear = Callable[[Node, dict[str, Any]], None]


@dataclass(frozen=True)
class _Action:
    plant: Plant
    clear: Clear


ACTIONS: dict[str, _Action] = {
    "foreign_process": _Action(_plant_foreign, _clear_foreign),
    "driver_version": _Action(_plant_driver_version, _clear_driver_version),
    "tmp_full": _Action(_plant_tmp_full, _clear_tmp_full),
    "devnode_missing": _Action(_plant_devnode_missing, _clear_devnode_missing),
    "link_flap": _Action(_plant_link_flap, _clear_link_flap),
    "hccl_timeout": _Action(_plant_hccl_timeout, _clear_hccl_timeout),
}


def plant(node: Node, knobs: Mapping[str, object]) -> dict[str, Any]:
    """Set ``knobs`` (checked by :func:`parse`) on ``node``; returns every fault the node has now."""
    faults = current(node)
    for name, value in knobs.items():
        if name in ACTIONS:
            ACTIONS[name].plant(node, value, faults)
        else:
            faults[name] = value
    return hardware.set_faults(_root(node), faults, replace=True)


def clear(node: Node, names: Sequence[str] = ()) -> dict[str, Any]:
    """Take the faults ``names`` (every fault when empty) away again; returns what the node has left."""
    unknown = [n for n in names if n not in ALL_KNOBS]
    if unknown:
        raise InputError(f"unknown fault knob {unknown[0]!r}; known: {', '.join(ALL_KNOBS)}")
    faults = current(node)
    for name in names or list(faults):
        if name in ACTIONS:
            ACTIONS[name].clear(node, faults)
        else:
            faults.pop(name, None)
    return hardware.set_faults(_root(node), faults, replace=True)


def forget_lost_at_boot(node: Node) -> None:
    """After a boot: the node knobs a boot undid are no longer planted (called by ``sim power``)."""
    if not (_root(node) / hardware.HW_CONFIG.lstrip("/")).is_file():
        return  # a node without simulated hardware has no knobs
    faults = current(node)
    if any(name in faults for name in LOST_AT_BOOT):
        for name in LOST_AT_BOOT:
            faults.pop(name, None)
        hardware.set_faults(_root(node), faults, replace=True)

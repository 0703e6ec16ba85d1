"""Simulated Ascend hardware (Atlas A2, Atlas A3, Atlas 300I Duo) for simulated nodes: the controller API.

The simulator is the only place hardware is faked. Inside a node, production code calls the real
names — ``lspci``, ``npu-smi``, ``/usr/local/Ascend/driver/tools/hccn_tool``, the vendor ``.run``
files — and they behave per the documented contracts and the verbatim samples in
``shared/reference/samples``. The node side is the stdlib-only package ``ascendsim``
(``provision-sim/provision_sim/hardware/node/ascendsim``), copied to ``/usr/lib/provision-sim/ascendsim``.

* :func:`install_tools` — once per base rootfs: the engine and the boot unit
  ``provision-sim-hardware.service`` (PCI view, firmware activation, driver load with device nodes).
* :func:`write_node_config` — once per node before boot: ``/etc/provision-sim/hardware.json``.
* :func:`set_faults` — change a node's fault knobs (before boot, or at runtime through the node root).

Fault knobs (``faults`` in hardware.json; the tools read the file on every call):

``npu_health``       ``{"3": "Critical"}`` (or ``Warning``/``Alarm``, or ``{"status":..., "error_code":...,
                     "error_info":...}``): Health column of ``npu-smi info`` and ``-t health``.
``ecc``              ``{"3": {"HBM Double Bit Error Count": 2}}``: counters of ``-t ecc``.
``dcmi_error``       ``-8005``: every npu-smi call fails with ``dcmi module initialize failed. ret is -8005``.
``link_down``        ``[5]``: ``hccn_tool -i 5 -link -g`` → DOWN, ``-net_health`` → Fault, ``-ping`` all lost.
``net_health``       ``{"2": "Receive timeout"}``: forced ``-net_health -g`` status.
``link_slow``        ``{"3": 0.25}``: NPU port 3 carries a quarter of its speed: hccl_test's
                     ``all_reduce_test`` on NPU 3 (``ascendsim/hccl.py``) reports a quarter of the
                     bandwidth (``link_down`` makes it fail with HCCL's RoCE error CQE line).
``disk_full``        ``true``: every ``.run`` stops at makeself's free-space check ("Not enough space left
                     in ... to decompress ...", exit 1) before writing anything.
``installer_crash``  ``{"driver": 40}`` (any component; or ``{"driver": {"percent": 40, "mode": "kill"}}``):
                     the installer writes the files of the earlier stages, then exits 1 with an ``[ERROR]``
                     line (``kill``: dies by SIGKILL, exit 137, no error line).
``installer_slow``   ``{"driver": 20}`` (any component): each stage of the installer takes 20 s, as a real
                     driver ``.run``'s DKMS build and copy take about a minute, so a power loss can land
                     in the middle of the install (its files written stage by stage, ``version.info`` last).
``npu_processes``    ``{"5": [{"pid": 4242, "memory_mb": 512}]}``: processes npu-smi lists on chip 5 (its
                     process table, as in vllm-ascend#5606) while the PID lives, named as the kernel names
                     them (``/proc/PID/comm``) unless ``name`` is given; HBM usage grows by ``memory_mb``.
``hbm_mb``           ``{"3": 256}``: chip 3's HBM capacity in MB (a smaller part than the model needs), its
                     idle use scaled to it; what npu-smi, and so the serving role's pre-serve check, reads.
:data:`KNOBS` types and checks every knob (``provision sim fault`` uses it).

Power follows the load. A chip's ``power_w`` in hardware.json is its idle power; ``npu-smi info`` (the
table, ``-t power``, ``-t common``, ``-t usages``) adds ``power_load_w`` (default 200 W) times the share of
the CPUs that the chip's holders kept busy over 0.2 s, measured on each call. The holders are the live
processes of the ``npu_processes`` knob and every process of a container given ``/dev/davinciN`` (through
the Ascend Docker Runtime or ``docker run --device``): the real vLLM CPU engine that serves the pool, whose
CPU use stands for the NPU's work. With no holder the call prints the idle power at once. The AI-core
utilisation follows the same share: ``aicore_pct`` (default 0) at idle, 100 with every CPU the holders may
use busy, a whole percent (``AICore(%)`` of the table, ``Aicore Usage Rate(%)`` and ``NPU Utilization(%)``
of ``-t usages`` / ``-t common``). The NPU-Exporter measures the same at each cache refresh
(``-updateTime``): ``npu_chip_info_utilization`` / ``_overall_utilization`` and ``npu_chip_info_power``.
A missing prerequisite needs no knob: leave the package (pciutils, net-tools, dkms, gcc, make, kernel
headers) or the ``HwHiAiUser`` account out of the node.

What the cluster code provides (nothing else is needed for the tools to work):

* PCI view: nothing — the boot unit bind-mounts its tree over ``/sys/bus/pci`` inside the node (needs
  CAP_SYS_ADMIN, which nspawn grants root in the container).
* NPU fabric for ``hccn_tool -ping`` / ``-net_health`` (optional): a network namespace per node holding
  :func:`npu_fabric_addresses` on one interface, all of them joined to a bridge that carries
  :func:`npu_fabric_gateways`, bind-mounted into the node with
  ``--bind-ro=/run/netns/<npu-netns>:/run/provision-sim/npu-netns``. Without it the ICMP probes run in
  the node's own namespace (so only addresses reachable there answer).
* The ``.run`` files of :mod:`provision_sim.mirror.run_files`, built for the nodes' ``uname -m``, served
  over HTTP.
* For the Ascend Docker Runtime (``docker-runtime`` ``.run``): nothing more — its OCI runtime
  (``ascendsim/docker_runtime.py``) runs inside the node's real dockerd and execs the node's ``runc``; the
  engine itself comes from the mirror (Debian's ``docker.io`` + closure, or the ``docker-engine`` rpm).
* In the package mirror: pciutils, net-tools, dkms, gcc, make and a package creating
  ``/lib/modules/$(uname -r)/build`` (Debian) or ``/usr/src/kernels/$(uname -r)`` (openEuler
  ``kernel-devel-$(uname -r)``) for the HOST kernel release, which is what ``uname -r`` says in a node.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.ascend import hardware as models
from provision.errors import ProvisionError

__all__ = [
    "BUS_IDS",
    "ENGINE_DIR",
    "HW_CONFIG",
    "KNOBS",
    "MODELS",
    "NPU_NETNS",
    "UNIT_NAME",
    "install_tools",
    "node_config",
    "node_source",
    "npu_fabric_addresses",
    "npu_fabric_gateways",
    "resolve_model",
    "set_faults",
    "write_node_config",
]

NODE_SOURCE = Path(__file__).resolve().parent / "node" / "ascendsim"
ENGINE_DIR = "/usr/lib/provision-sim"
HW_CONFIG = "/etc/provision-sim/hardware.json"
UNIT_NAME = "provision-sim-hardware.service"
NPU_NETNS = "/run/provision-sim/npu-netns"
"""Where hccn_tool looks for the NPU fabric's network namespace inside a node."""

MODELS: dict[str, dict[str, int]] = {
    "910B1": {"hbm_mb": 65536, "aicore": 24, "hbm_base_mb": 3400},
    "910B2": {"hbm_mb": 65536, "aicore": 24, "hbm_base_mb": 3370},
    "910B2C": {"hbm_mb": 65536, "aicore": 24, "hbm_base_mb": 3370},
    "910B3": {"hbm_mb": 65536, "aicore": 20, "hbm_base_mb": 3300},
    "910B4": {"hbm_mb": 32768, "aicore": 20, "hbm_base_mb": 2640},
    # Atlas A3: idle HBM 2876..3133 MB per die in vllm-ascend#5850. The AI core count has no capture.
    "Ascend910": {"hbm_mb": 65536, "aicore": 24, "hbm_base_mb": 2880},
    # Atlas 300I Duo: DDR only, 1412..1529 MB used idle of 44280 / 43693 (Syllo/nvtop#421).
    "310P3": {"hbm_mb": 0, "ddr_mb": 44280, "aicore": 8, "hbm_base_mb": 1410},
}
"""npu-smi ``Name`` → HBM (or DDR) capacity (MB), AI cores, idle memory usage of the driver."""

MODEL_ALIASES = {"910_93": "Ascend910", "a3": "Ascend910", "300i-duo": "310P3"}
"""``provision sim up --model`` names besides the npu-smi names (case-insensitive)."""

A3_BUS_IDS = (
    "0000:9D:00.0",
    "0000:9F:00.0",
    "0000:99:00.0",
    "0000:9B:00.0",
    "0000:95:00.0",
    "0000:97:00.0",
    "0000:91:00.0",
    "0000:93:00.0",
    "0000:8D:00.0",
    "0000:8F:00.0",
    "0000:89:00.0",
    "0000:8B:00.0",
    "0000:85:00.0",
    "0000:87:00.0",
    "0000:81:00.0",
    "0000:83:00.0",
)
"""Chip (phy id) → PCIe address of an Atlas 800 A3, as its npu-smi prints them (vllm-ascend#5850)."""

BOARDS: dict[str, dict[str, str]] = {
    # IT21HMDC_Bin5 / 0x60 / subsystem 0x3003: the 910B board capture (tests/fixtures/samples).
    "a2": {"product_name": "IT21HMDC_Bin5", "board_id": "0x60", "subsystem_device": "0x3003"},
    # No public `-t board` capture of an A3 or a 300I Duo: placeholders the parsers read like any value.
    "a3": {"product_name": "NA", "board_id": "0x71", "subsystem_device": "0x3001"},
    "300i-duo": {"product_name": "NA", "board_id": "0x64", "subsystem_device": "0x0100"},
}


def resolve_model(name: str) -> str:
    """``910b3`` → ``910B3``, ``910_93`` → ``Ascend910``, ``310p3`` → ``310P3`` (the npu-smi Name)."""
    want = name.strip().lower()
    for key in MODELS:
        if key.lower() == want:
            return key
    if want in MODEL_ALIASES:
        return MODEL_ALIASES[want]
    known = ", ".join([*MODELS, *MODEL_ALIASES])
    raise ProvisionError(f"unknown NPU model {name!r}; known: {known}")


BUS_IDS = (
    "0000:C1:00.0",
    "0000:C2:00.0",
    "0000:81:00.0",
    "0000:82:00.0",
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:41:00.0",
    "0000:42:00.0",
    "0000:C3:00.0",
    "0000:C4:00.0",
    "0000:83:00.0",
    "0000:84:00.0",
    "0000:03:00.0",
    "0000:04:00.0",
    "0000:43:00.0",
    "0000:44:00.0",
)
"""NPU id → PCIe address, in the order of the Atlas 800 A2 samples (C1, C2, 81, 82, 01, 02, 41, 42)."""

EXTRA_PCI = (
    {
        "address": "0000:00:00.0",
        "vendor": "0x19e5",
        "device": "0xa120",
        "class": "0x060400",
        "revision": "0x21",
    },
    {
        "address": "0000:7d:00.0",
        "vendor": "0x19e5",
        "device": "0xa222",
        "class": "0x020000",
        "revision": "0x21",
        "subsystem_vendor": "0x19e5",
        "subsystem_device": "0x0454",
    },
)
"""Other Huawei functions of a Kunpeng host (a root port, an HNS NIC): ``lspci -d 19e5:`` lists them too."""

UNIT = f"""[Unit]
Description=Simulated Ascend NPU hardware: PCI view, firmware activation, driver load (provision sim)
Documentation=file://{ENGINE_DIR}/ascendsim/boot.py
DefaultDependencies=no
ConditionPathExists={HW_CONFIG}
After=local-fs.target systemd-tmpfiles-setup-dev.service
Before=sysinit.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
Environment=PYTHONPATH={ENGINE_DIR}
Environment=PYTHONDONTWRITEBYTECODE=1
ExecStart=/usr/bin/python3 -m ascendsim boot

[Install]
WantedBy=sysinit.target
"""


MPIRUN = "/usr/bin/mpirun"


def mpirun_script() -> str:
    """``/usr/bin/mpirun`` as the simulator stands in for a site's MPICH (Hydra): ``ascendsim/hccl.py``'s
    launcher, which starts ranks on the other nodes over ssh as Hydra does."""
    return (
        "#!/usr/bin/python3\n"
        "# mpirun (MPICH Hydra) - simulated by provision sim: launches hccl_test's ranks\n"
        "import sys\n\n"
        f'sys.path.insert(0, "{ENGINE_DIR}")\n'
        "from ascendsim.hccl import mpirun  # noqa: E402\n\n"
        "sys.exit(mpirun())\n"
    )


def node_source() -> Path:
    """The ``ascendsim`` package folder (copied into nodes and into every ``.run`` payload)."""
    return NODE_SOURCE


def _copy_engine(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(NODE_SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def install_tools(rootfs: Path) -> None:
    """Install the simulator's engine and boot unit into a base rootfs (a tree that becomes ``/``).

    Writes ``/usr/lib/provision-sim/ascendsim/`` (the engine), ``/etc/systemd/system/``
    ``provision-sim-hardware.service`` enabled for ``sysinit.target``, and the empty folders
    ``/etc/provision-sim`` and ``/var/lib/provision-sim``. Nothing vendor-made is installed: no npu-smi,
    no hccn_tool, no driver — those come from the ``.run`` packages of :mod:`provision_sim.mirror.run_files`.
    """
    rootfs = Path(rootfs)
    if not rootfs.is_dir():
        raise ProvisionError(f"rootfs {rootfs} is not a directory")
    _copy_engine(rootfs / ENGINE_DIR.lstrip("/") / "ascendsim")
    units = rootfs / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    (units / UNIT_NAME).write_text(UNIT, encoding="utf-8")
    wants = units / "sysinit.target.wants"
    wants.mkdir(exist_ok=True)
    link = wants / UNIT_NAME
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(f"/etc/systemd/system/{UNIT_NAME}")
    for folder in ("etc/provision-sim", "var/lib/provision-sim"):
        (rootfs / folder).mkdir(parents=True, exist_ok=True)


def _cpu_affinity(bus: int) -> tuple[int, str]:
    """NUMA node and CPU list of a PCIe bus on a 4-socket-die Kunpeng 920 (as in the topo sample)."""
    numa = bus >> 6
    first = numa * 48
    return numa, f"{first}-{first + 23}"


def npu_fabric_addresses(index: int, npus: int, npu_net: str = "10.201") -> list[str]:
    """The RoCE addresses (CIDR) of node ``index``'s NPU ports: ``<npu_net>.<n>.<10 + index>/24``."""
    return [f"{npu_net}.{n}.{10 + index}/24" for n in range(npus)]


def npu_fabric_gateways(npus: int, npu_net: str = "10.201") -> list[str]:
    """The fabric side (CIDR) of every NPU rail: ``<npu_net>.<n>.1/24`` (each node's hccn gateway)."""
    return [f"{npu_net}.{n}.1/24" for n in range(npus)]


def _layout(model: str, chips: int) -> tuple[models.HardwareModel, list[tuple[int, int, str, str]]]:
    """(hardware model, per chip: (NPU id, chip id on the NPU, npu-smi Bus-Id, PCI address))."""
    spec = models.model_for_chip(model)
    if spec is None:
        raise ProvisionError(f"NPU model {model!r} is not in provision/data/hardware.yml")
    per = spec.chips_per_npu
    if chips % per:
        raise ProvisionError(f"a {spec.product} has {per} chips per NPU: npus must be a multiple of {per}")
    out: list[tuple[int, int, str, str]] = []
    for n in range(chips):
        npu, chip = divmod(n, per)
        if spec.name == "a3":
            bus = pci = A3_BUS_IDS[n]
        elif spec.name == "300i-duo":
            # One PCI function per chip (Huawei's bug-report script counts 310P chips with `lspci | grep
            # d500`), but npu-smi prints the card's address for both chips (Syllo/nvtop#421).
            pci = f"0000:{n + 1:02X}:00.0"
            bus = f"0000:{npu * per + 1:02X}:00.0"
        else:
            bus = pci = BUS_IDS[n]
        out.append((npu, chip, bus, pci))
    return spec, out


def node_config(
    *,
    name: str,
    index: int,
    npus: int,
    model: str = "910B3",
    faults: Mapping[str, object] | None = None,
    npu_net: str = "10.201",
    factory_firmware: str = "7.7.0.1.231",
) -> dict[str, Any]:
    """The content of a node's ``hardware.json`` (values derive from ``index`` so nodes differ).

    ``model`` is the npu-smi Name (``910B3``, ``Ascend910`` for an A3, ``310P3`` for a 300I Duo) or an
    alias of :func:`resolve_model`. ``npus`` counts CHIPS (devices ``/dev/davinciN``, hccn_tool ports): an
    A3 node has 16 (8 NPUs x 2), a 300I Duo card 2. Entry ``n`` of ``npus`` is chip ``n``: its ``npu_id``
    and ``chip_id`` say where npu-smi shows it.

    Chip ``n`` of node ``index`` has the RoCE address ``<npu_net>.<n>.<10 + index>/24`` (one /24 per port
    "rail", like real multi-node HCCL fabrics) and gateway ``<npu_net>.<n>.1``; no netdetect address
    (``-net_health -g`` says ``Init`` until ``-netdetect -s`` sets one).
    """
    model = resolve_model(model)
    if not 1 <= npus <= len(BUS_IDS):
        raise ProvisionError(f"npus must be 1..{len(BUS_IDS)}, got {npus}")
    if not 0 <= index <= 240:
        raise ProvisionError(f"index must be 0..240, got {index}")
    spec = MODELS[model]
    hw, layout = _layout(model, npus)
    addresses = npu_fabric_addresses(index, npus, npu_net)
    gateways = npu_fabric_gateways(npus, npu_net)
    npu_list: list[dict[str, Any]] = []
    for n, (npu_id, chip_id, bus_id, pci_address) in enumerate(layout):
        numa, cpus = _cpu_affinity(int(pci_address[5:7], 16))
        ddr = spec.get("ddr_mb", 0) - (587 if chip_id % 2 else 0)  # the two 310P chips differ (nvtop#421)
        npu_list.append(
            {
                "id": n,
                "npu_id": npu_id,
                "chip_id": chip_id,
                "bus_id": bus_id,
                "pci_address": pci_address,
                "serial": f"1025C9{index:03d}{npu_id:03d}",
                "vdie_id": f"{index:08X} 20B03704 4A10C8D4 14CC040A D21020{n:02X}",
                "ndie_id": f"{index:08X} 20401010 4E10C8D4 14CC040A A41020{n:02X}",
                "hbm_total_mb": spec["hbm_mb"],
                "hbm_used_mb": (spec["hbm_base_mb"] + (index * 7 + n * 11) % 30) if spec["hbm_mb"] else 0,
                "memory_total_mb": max(ddr, 0),
                "memory_used_mb": (spec["hbm_base_mb"] + (index * 7 + n * 11) % 30) if ddr > 0 else 0,
                "power_w": round(88.0 + ((index * 37 + n * 53) % 160) / 10.0, 1),
                "temp_c": 36 + (index * 5 + n * 3) % 11,
                "aicore_count": spec["aicore"],
                "aicore_freq_mhz": 1800,
                "numa_node": numa,
                "cpu_affinity": cpus,
                "ip": addresses[n].split("/")[0],
                "netmask": "255.255.255.0",
                "gateway": gateways[n].split("/")[0],
                "netdetect": None,
                "processes": [],
            }
        )
    board = BOARDS[hw.name]
    return {
        "schema": 1,
        "node": {"name": name, "index": index},
        "model": model,
        "hardware_model": hw.name,
        "chips_per_npu": hw.chips_per_npu,
        "pci": {
            "vendor": "0x19e5",
            "device": hw.pci_device_id,
            "class": "0x120000",
            # rev 20 is the 910B capture's; no lspci capture of the others gives theirs.
            "revision": "0x20",
            "subsystem_vendor": "0x19e5",
            "subsystem_device": board["subsystem_device"],
        },
        "board": {
            "product_name": board["product_name"],
            "model": "NA",
            "manufacturer": "Huawei",
            "board_id": board["board_id"],
            "pcb_id": "A",
            "bom_id": "1",
        },
        "factory_firmware": factory_firmware,
        "mcu_version": "23.3.13",
        "npu_smi_path": "/usr/local/bin/npu-smi",
        "npu_netns": NPU_NETNS,
        "npus": npu_list,
        "extra_pci": [dict(d) for d in EXTRA_PCI],
        "faults": dict(faults or {}),
    }


def write_node_config(
    node_root: Path,
    *,
    name: str,
    index: int,
    npus: int,
    model: str = "910B3",
    faults: Mapping[str, object] | None = None,
    npu_net: str = "10.201",
    factory_firmware: str = "7.7.0.1.231",
) -> None:
    """Write ``/etc/provision-sim/hardware.json`` under ``node_root`` (see :func:`node_config`)."""
    config = node_config(
        name=name,
        index=index,
        npus=npus,
        model=model,
        faults=faults,
        npu_net=npu_net,
        factory_firmware=factory_firmware,
    )
    _write_json(Path(node_root) / HW_CONFIG.lstrip("/"), config)


def set_faults(node_root: Path, faults: Mapping[str, object], *, replace: bool = False) -> dict[str, Any]:
    """Merge ``faults`` into a node's hardware.json (``replace=True``: set them exactly); returns the knobs.

    ``node_root`` may be the node's upper layer before boot or its mounted root while it runs: the
    tools re-read the file on every call. A knob set to ``None`` is removed.
    """
    path = Path(node_root) / HW_CONFIG.lstrip("/")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProvisionError(f"{path} does not exist: write_node_config() first") from None
    current: dict[str, Any] = {} if replace else dict(config.get("faults") or {})
    for key, value in faults.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    config["faults"] = current
    _write_json(path, config)
    return current


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


# -- the fault knobs, typed ------------------------------------------------------------------------------


def _chip_key(key: object) -> str:
    if not (isinstance(key, str) and key.isdigit()):
        raise ValueError(f'keys are chip ids such as "3", not {key!r}')
    return key


def _map(value: object, check: Callable[[object], object]) -> dict[str, object]:
    if not isinstance(value, dict) or not value:
        raise ValueError("give a JSON map of chip id to value, e.g. '{\"3\": ...}'")
    return {_chip_key(k): check(v) for k, v in value.items()}


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"give an integer, not {value!r}")
    return value


def _chips(value: object) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value or not all(_int(v) >= 0 for v in value):
        raise ValueError("give a chip id or a JSON list of chip ids, e.g. [5]")
    return [int(v) for v in value]


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"give a text, not {value!r}")
    return value


HEALTH = ("OK", "Warning", "Alarm", "Critical")


def _health(value: object) -> object:
    status = value.get("status", "Alarm") if isinstance(value, dict) else value
    if status not in HEALTH:
        raise ValueError(
            f"a Health is one of {', '.join(HEALTH)} (or a map with status/error_code/error_info)"
        )
    return value


def _counters(value: object) -> dict[str, int]:
    if not isinstance(value, dict) or not value:
        raise ValueError('give the ECC counters of a chip, e.g. {"HBM Double Bit Error Count": 2}')
    return {_text(k): _int(v) for k, v in value.items()}


def _processes(value: object) -> list[dict[str, object]]:
    entries = value if isinstance(value, list) else [value]
    out: list[dict[str, object]] = []
    for entry in entries:
        if not isinstance(entry, dict) or "pid" not in entry or set(entry) - {"pid", "name", "memory_mb"}:
            raise ValueError('give processes as [{"pid": 4242, "memory_mb": 512}] (name is optional)')
        out.append({k: _text(v) if k == "name" else _int(v) for k, v in entry.items()})
    return out


def _crash(value: object) -> dict[str, object]:
    if not isinstance(value, dict) or not value:
        raise ValueError('give a JSON map of component to percent, e.g. {"driver": 40}')
    for component, how in value.items():
        percent = how.get("percent") if isinstance(how, dict) else how
        if not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100:
            raise ValueError(f'{component}: give a percent 0..100 (or {{"percent": 40, "mode": "kill"}})')
        if isinstance(how, dict) and how.get("mode", "error") not in ("error", "kill"):
            raise ValueError(f"{component}: mode is error or kill")
    return dict(value)


def _slow(value: object) -> dict[str, int]:
    if not isinstance(value, dict) or not value:
        raise ValueError('give a JSON map of component to seconds per stage, e.g. {"driver": 20}')
    for component, seconds in value.items():
        if not isinstance(seconds, int) or isinstance(seconds, bool) or not 0 < seconds <= 600:
            raise ValueError(f"{component}: give the seconds each stage takes, 1..600")
    return dict(value)


def _capacity(value: object) -> int:
    number = _int(value)
    if number <= 0:
        raise ValueError(f"give the HBM capacity in MB, above 0, not {value!r}")
    return number


def _share(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(f"give the share of the port's speed left, above 0 and at most 1, not {value!r}")
    return float(value)


def _true(value: object) -> bool:
    if value is not True:
        raise ValueError("takes no value (or true)")
    return True


@dataclass(frozen=True)
class Knob:
    """One fault knob of ``hardware.json``: what it takes and what it does."""

    name: str
    example: str
    does: str
    check: Callable[[object], object]
    default: object = None
    """The value of a bare ``KNOB`` (no ``=VALUE``); ``None``: a value is required."""


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "npu_health",
            '\'{"3": "Critical"}\'',
            "npu-smi Health of chip 3 (Warning, Alarm, Critical)",
            lambda v: _map(v, _health),
        ),
        Knob(
            "ecc",
            '\'{"3": {"HBM Double Bit Error Count": 2}}\'',
            "counters of npu-smi info -t ecc",
            lambda v: _map(v, _counters),
        ),
        Knob(
            "dcmi_error",
            "-8005",
            "every npu-smi call fails: dcmi module initialize failed. ret is -8005",
            _int,
            default=-8005,
        ),
        Knob("link_down", "'[5]'", "hccn_tool -i 5 -link -g: DOWN (net health Fault, pings lost)", _chips),
        Knob(
            "net_health",
            '\'{"2": "Receive timeout"}\'',
            "forced hccn_tool -i 2 -net_health -g status",
            lambda v: _map(v, _text),
        ),
        Knob(
            "link_slow",
            "'{\"3\": 0.25}'",
            "NPU port 3 carries a quarter of its speed (hccl_test's bandwidth follows)",
            lambda v: _map(v, _share),
        ),
        Knob("disk_full", "", "every .run installer stops at its free-space check", _true, default=True),
        Knob(
            "installer_crash",
            "'{\"driver\": 40}'",
            "the driver .run dies at 40 % (mode kill: SIGKILL)",
            _crash,
        ),
        Knob(
            "installer_slow",
            "'{\"driver\": 20}'",
            "each stage of the driver .run takes 20 s (a power loss can land mid-install)",
            _slow,
        ),
        Knob(
            "npu_processes",
            '\'{"5": [{"pid": 4242, "memory_mb": 512}]}\'',
            "npu-smi lists process 4242 on chip 5 while it lives",
            lambda v: _map(v, _processes),
        ),
        Knob(
            "hbm_mb",
            "'{\"3\": 256}'",
            "npu-smi reports 256 MB of HBM on chip 3 (a smaller part; its idle use scaled to it)",
            lambda v: _map(v, _capacity),
        ),
    )
}

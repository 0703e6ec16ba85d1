"""Pre-serve checks: what a node must offer before the serving role starts an instance on it.

Before any unit of the ``vllm_serve`` role starts, each instance's pool is checked on its node:

* **NPUs**: every NPU of the pool is in ``npu-smi info``, its Health column says ``OK`` and its device node
  ``/dev/davinciN`` exists;
* **foreign holders**: no process in npu-smi's process table holds one of the pool's NPUs unless it belongs
  to the pool's own instance (its unit ``vllm-<pool>.service``, or in container mode the docker scope of its
  container ``vllm-<pool>``), and no other running container has the NPU (``--device /dev/davinciN`` or
  ``ASCEND_VISIBLE_DEVICES``). Two engines on one NPU fail with -8005 or 507008 (vllm-ascend#2698, #2542);
* **HBM**: vLLM reserves ``gpu_memory_utilization`` x the HBM of each NPU at start and refuses to start when
  less is free (vLLM's worker: "Free memory on device ... is less than desired GPU memory utilization"); the
  weights, split over tensor and pipeline parallelism, must fit inside that reservation with room left for
  the KV cache. So per NPU: ``weights / (TP x PP) < utilization x HBM total`` and ``HBM free >= utilization
  x HBM total``, where HBM free counts what the pool's own running instance holds as free (a restart gives
  it back). The weights' size is ``metadata.total_size`` of ``model.safetensors.index.json`` when the folder
  has one (the tensors alone), else the folder's size;
* **quantization**: msModelSlim writes ``quant_model_description.json`` beside the weights it quantized,
  with their type in ``model_quant_type`` (``W8A8``, ``W8A8_DYNAMIC``, ``W4A8_DYNAMIC``, ...: msModelSlim's
  docs, "quant_model_description.json 详解", gitcode.com/Ascend/msmodelslim; vllm-ascend#1270 renames the
  description file to this name for vLLM). It must match the profile's ``weights_quantization``: none for
  weights without the file (or ``FLOAT``).

:data:`PROBE_SCRIPT` reads what the checks need in one read-only command (with the facts probe's
``npu-smi info``); :func:`problems` decides. Pure functions but the script.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from provision.ascend.facts import sections
from provision.ascend.hccn_gate import unit_of_cgroup
from provision.ascend.npu_smi import NpuSmiInfo, NpuStatus
from provision.inventory.profiles import all_profiles
from provision.inventory.schema import ServingProfile
from provision.scripts import node_script

DEFAULT_UTILIZATION = 0.9
"""vLLM's ``--gpu-memory-utilization`` when the profile sets none."""
INDEX_FILE = "model.safetensors.index.json"
QUANT_FILE = "quant_model_description.json"
MIB = 1 << 20

QUANT_TYPES: dict[str, str | None] = {
    "FLOAT": None,
    "W8A8": "w8a8",
    "W8A8_MIX": "w8a8",
    "W8A8_DYNAMIC": "w8a8-dynamic",
    "W4A8_DYNAMIC": "w4a8",
    "W4A4_DYNAMIC": "w4a4",
}
"""msModelSlim's ``model_quant_type`` -> the profile's ``weights_quantization`` it serves with."""

# Positional arguments: the model folders. Read-only; each part tolerates a missing tool.
PROBE_SCRIPT = node_script("preserve_probe.sh")


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason an instance must not start: its pool, the NPUs concerned, which check, what and the fix."""

    pool: str
    npus: tuple[int, ...]
    check: str
    """``npu``, ``foreign``, ``hbm``, ``quantization`` or ``weights``."""
    message: str

    def line(self, host: str) -> str:
        npus = ", ".join(map(str, self.npus))
        where = f"NPU {npus}" if len(self.npus) == 1 else f"NPUs {npus}"
        return f"{host} pool {self.pool} {where}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Probe:
    """What :data:`PROBE_SCRIPT` (and the facts probe before it) saw."""

    npu_smi: NpuSmiInfo | None
    npu_smi_error: str | None
    devnodes: frozenset[int]
    invocations: Mapping[str, str]
    containers: Sequence[Mapping[str, Any]] | None
    weights: Mapping[str, Mapping[str, Any]]


def parse_probe(text: str, npu_smi: NpuSmiInfo | None, npu_smi_error: str | None) -> Probe:
    """The sections of :data:`PROBE_SCRIPT`'s output; ``npu_smi`` is the facts probe's ``npu-smi info``."""
    found = dict(sections(text))
    invocations = {
        label.removeprefix("invocation "): body.strip()
        for label, body in found.items()
        if label.startswith("invocation ")
    }
    containers: list[Mapping[str, Any]] | None = None
    if "containers" in found:
        try:
            loaded = json.loads(found["containers"] or "[]")
        except ValueError:
            loaded = []
        containers = [c for c in loaded if isinstance(c, Mapping)] if isinstance(loaded, list) else []
    try:
        weights = json.loads(found.get("weights") or "{}")
    except ValueError:
        weights = {}
    return Probe(
        npu_smi=npu_smi,
        npu_smi_error=npu_smi_error,
        devnodes=frozenset(int(w) for w in found.get("devnodes", "").split() if w.isdigit()),
        invocations=invocations,
        containers=containers,
        weights=weights if isinstance(weights, Mapping) else {},
    )


def holders(cgroups: Sequence[tuple[str, str]]) -> dict[int, str | None]:
    """PID -> its systemd unit, from the ``cgroup PID`` sections of the doctor's holders script."""
    out: dict[int, str | None] = {}
    for label, body in cgroups:
        kind, _, pid = label.partition(" ")
        if kind == "cgroup" and pid.isdigit():
            out[int(pid)] = unit_of_cgroup(body)
    return out


def logic_id(npu: NpuStatus) -> int:
    """The ``/dev/davinciN`` index of an npu-smi block (its Phy-ID/Device where an NPU has several chips)."""
    return npu.id if npu.chip_device is None else npu.chip_device


def weights_bytes(entry: Mapping[str, Any]) -> tuple[int | None, str]:
    """The weights' size and where it comes from: the safetensors index's total_size, else the folder's."""
    index = entry.get("index") or {}
    total = index.get("total_size") if isinstance(index, Mapping) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return total, f"{INDEX_FILE} metadata.total_size"
    size = entry.get("bytes")
    if isinstance(size, int) and size > 0:
        return size, "the folder's size"
    return None, ""


def quant_problem(
    profile_name: str, profile: ServingProfile, model: str, entry: Mapping[str, Any]
) -> str | None:
    """Why the weights' quantization (their description file) does not match the profile, or None."""
    want = profile.weights_quantization
    quant = entry.get("quant")
    fix = (
        f"set quantization: ascend and weights_quantization to the weights' type in profile {profile_name}, "
        "or point its model at the weights it names"
    )
    if quant is None:
        if want is None:
            return None
        return (
            f"profile {profile_name} wants {want} weights (msModelSlim), but {model} has no {QUANT_FILE}, "
            f"which msModelSlim writes beside the weights it quantizes. Fix: {fix}."
        )
    if not isinstance(quant, Mapping) or "error" in quant:
        error = quant.get("error") if isinstance(quant, Mapping) else quant
        return f"{model}/{QUANT_FILE} is unreadable ({error}). Fix: restore it from the quantized weights."
    raw = quant.get("model_quant_type")
    kind = str(raw).upper() if raw is not None else None
    if kind is None:
        return (
            f"{model}/{QUANT_FILE} has no model_quant_type: not an msModelSlim description. "
            f"Fix: restore it from the quantized weights, or {fix}."
        )
    if kind in QUANT_TYPES and QUANT_TYPES[kind] == want:
        return None
    wanted = want or "none (unquantized weights)"
    known = (
        "" if kind in QUANT_TYPES else f" ({raw} is not a type vllm-ascend serves with this profile field)"
    )
    return (
        f"the weights in {model} are {raw} ({QUANT_FILE} model_quant_type){known}, profile {profile_name} "
        f"says weights_quantization {wanted}. Fix: {fix}."
    )


def _own(pool: str, unit: str | None, own_scopes: Mapping[str, str]) -> bool:
    return unit is not None and (unit == f"vllm-{pool}.service" or own_scopes.get(unit) == pool)


def _container_npus(container: Mapping[str, Any]) -> set[int]:
    npus: set[int] = set()
    host_config = container.get("HostConfig") or {}
    for device in host_config.get("Devices") or []:
        found = re.fullmatch(r"/dev/davinci(\d+)", str((device or {}).get("PathOnHost", "")))
        if found:
            npus.add(int(found.group(1)))
    for item in (container.get("Config") or {}).get("Env") or []:
        name, _, value = str(item).partition("=")
        if name == "ASCEND_VISIBLE_DEVICES":
            npus.update(int(v) for v in re.split(r"[,\s]+", value) if v.isdigit())
            for first, last in re.findall(r"(\d+)-(\d+)", value):
                npus.update(range(int(first), int(last) + 1))
    return npus


def problems(
    instances: Sequence[Mapping[str, Any]],
    user_profiles: Mapping[str, Any] | None,
    probe: Probe,
    unit_of: Mapping[int, str | None],
) -> tuple[list[Problem], list[str]]:
    """Every reason an instance of ``instances`` (the role's, one per served pool) must not start on this
    node, and the notes on what could not be checked (no npu-smi, a model folder not on the node yet)."""
    profiles = all_profiles(user_profiles)
    found: list[Problem] = []
    notes: list[str] = []
    containers = list(probe.containers or [])
    names = {str(c.get("Name", "")).lstrip("/"): c for c in containers}
    own_scopes = {
        f"docker-{c.get('Id')}.scope": name.removeprefix("vllm-")
        for name, c in names.items()
        if name.startswith("vllm-")
    }
    blocks = {logic_id(n): n for n in probe.npu_smi.npus} if probe.npu_smi else {}
    if probe.npu_smi is None:
        why = probe.npu_smi_error or "npu-smi not found"
        notes.append(f"NPU checks skipped: {why} (the NPU driver's tool; install the driver first)")
    for inst in instances:
        pool = str(inst["pool"])
        devices = [int(d) for d in inst.get("devices") or []]
        profile_name = str(inst["profile"])
        profile = profiles[profile_name]
        model = str(inst.get("model") or "")
        utilization = profile.gpu_memory_utilization or DEFAULT_UTILIZATION
        if probe.npu_smi is not None:
            found += _npu_problems(pool, devices, blocks, probe.devnodes, unit_of, own_scopes)
        for name, container in names.items():
            if name == f"vllm-{pool}":
                continue
            shared = sorted(_container_npus(container) & set(devices))
            if shared:
                found.append(
                    Problem(
                        pool,
                        tuple(shared),
                        "foreign",
                        f"container {name} has it. Fix: `docker stop {name}` (two containers cannot share an "
                        "NPU: -8005), or give the pool other NPUs.",
                    )
                )
        entry = probe.weights.get(model)
        if not entry or not entry.get("exists"):
            notes.append(f"pool {pool}: weights and quantization not checked, {model} is not on the node")
            continue
        problem = quant_problem(profile_name, profile, model, entry)
        if problem:
            found.append(Problem(pool, tuple(devices), "quantization", problem))
        if probe.npu_smi is not None:
            found += _hbm_problems(
                pool, devices, blocks, profile_name, profile, utilization, entry, unit_of, own_scopes
            )
    return found, notes


def _npu_problems(
    pool: str,
    devices: Sequence[int],
    blocks: Mapping[int, NpuStatus],
    devnodes: frozenset[int],
    unit_of: Mapping[int, str | None],
    own_scopes: Mapping[str, str],
) -> list[Problem]:
    found: list[Problem] = []
    for device in devices:
        block = blocks.get(device)
        if block is None:
            listed = ", ".join(map(str, sorted(blocks))) or "none"
            found.append(
                Problem(
                    pool,
                    (device,),
                    "npu",
                    f"not in npu-smi info (it lists NPU {listed}). Fix: give the pool NPUs this node has "
                    "(npu_pools_list), or check the driver (`provision doctor INVENTORY --limit HOST`).",
                )
            )
            continue
        if not block.healthy:
            found.append(
                Problem(
                    pool,
                    (device,),
                    "npu",
                    f"npu-smi Health is {block.health}. Fix: `npu-smi info -t health -i {block.id}` names "
                    "the alarm; repair or replace it, or take it out of the pool.",
                )
            )
        if device not in devnodes:
            found.append(
                Problem(
                    pool,
                    (device,),
                    "npu",
                    f"/dev/davinci{device} is missing. Fix: reload the NPU driver (playbooks/driver.yml), "
                    "or reboot the node.",
                )
            )
        for process in block.processes:
            unit = unit_of.get(process.pid)
            if _own(pool, unit, own_scopes):
                continue
            where = f"unit {unit}" if unit else "no systemd unit"
            stop = (
                f"`systemctl stop {unit}`" if unit and unit.endswith(".service") else f"`kill {process.pid}`"
            )
            found.append(
                Problem(
                    pool,
                    (device,),
                    "foreign",
                    f"process {process.pid} ({process.name}, {where}) holds it with {process.memory_mb} MB "
                    f"of HBM (npu-smi's process table). Fix: stop it ({stop}), or give the pool other NPUs.",
                )
            )
    return found


def _hbm_problems(
    pool: str,
    devices: Sequence[int],
    blocks: Mapping[int, NpuStatus],
    profile_name: str,
    profile: ServingProfile,
    utilization: float,
    entry: Mapping[str, Any],
    unit_of: Mapping[int, str | None],
    own_scopes: Mapping[str, str],
) -> list[Problem]:
    size, source = weights_bytes(entry)
    split = profile.tensor_parallel_size * profile.pipeline_parallel_size
    found: list[Problem] = []
    fix = (
        "Fix: a pool of NPUs with more HBM, a larger tensor_parallel_size (more NPUs), smaller (quantized) "
        "weights, or a higher gpu_memory_utilization; vllm_serve_preserve_force: true starts it anyway."
    )
    for device in devices:
        block = blocks.get(device)
        if block is None or not block.hbm_total_mb:
            continue
        total = block.hbm_total_mb
        reserve = utilization * total
        if size is not None:
            share = size / split / MIB
            if share >= reserve:
                found.append(
                    Problem(
                        pool,
                        (device,),
                        "hbm",
                        f"the weights do not fit its HBM: {share:.0f} MB per NPU ({source} "
                        f"{size / MIB:.0f} MB / TP x PP {split}) >= gpu_memory_utilization {utilization:g} "
                        f"x {total} MB = {reserve:.0f} MB, nothing left for the KV cache (profile "
                        f"{profile_name}). {fix}",
                    )
                )
        mine = [p for p in block.processes if _own(pool, unit_of.get(p.pid), own_scopes)]
        own = sum(p.memory_mb or 0 for p in mine)
        free = max(0, total - (block.hbm_used_mb or 0) + own)
        if free < reserve:
            found.append(
                Problem(
                    pool,
                    (device,),
                    "hbm",
                    f"{free} MB of its {total} MB HBM is free, vLLM reserves gpu_memory_utilization "
                    f"{utilization:g} x {total} MB = {reserve:.0f} MB at start and would refuse it. {fix}",
                )
            )
    return found

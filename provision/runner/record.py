"""The converged record: what a successful ``provision apply`` left on a node, so the next apply can skip it.

After ``site.yml`` converged a node, provision writes ``/var/lib/provision/converged.json`` on it: the
fingerprint of the run's inputs and what the node looked like at the end of the run. The next ``apply``
asks every node one question first (``playbooks/converged.yml``, one read-only command per node): are the
inputs the same and does the node still look exactly so? A node that does, whose NPUs are healthy and
whose endpoints pass the health gate, is done; the others (and the rest of their serving groups) run
``site.yml``. ``provision apply --full`` runs ``site.yml`` everywhere.

What "looks exactly so" covers is not a second list kept by hand: it is every resource the runs' tasks
named (:func:`keys_of_result`, from the task results provision already reads as events):

- **paths** a task wrote or read (template, copy, file, lineinfile, get_url, unarchive, stat, slurp, find,
  ascend_state, ...): type, mode, owner, group and sha1 (size and mtime above :data:`BIG_FILE`);
- **units** a task managed (systemd_service, service): LoadState, ActiveState, UnitFileState;
- **packages** a task installed or held (dnf, apt, package, dpkg_selections): version and state;
- **users** and **groups** a task created: uid/gid;
- always: the running kernel, /etc/os-release, and the NPUs (count, PCI addresses, driver and firmware
  versions, ``npu-smi`` health) read with the same probe as ``ascend_facts``.

The keys accumulate over applies (a node's record keeps the keys of earlier records), so what a first
apply wrote stays watched when a later apply's roles end early. The observation is done on the node by
:data:`OBSERVE_SCRIPT` (standard library only, Python 3.6+) and compared here, on the controller.

The fingerprint (:func:`fingerprint`) covers the host's inventory variables, the playbook, and the digest of
every file of playbooks/, roles/, plugins/, ansible.cfg and the provision package (:func:`code_digest`).
A host variable that reads outside the inventory (``lookup``/``query``/``now``) makes the host always run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from provision import __version__, paths
from provision.inventory.load import plain
from provision.scripts import node_script
from provision.systemd import parse_show

RECORD_PATH = "/var/lib/provision/converged.json"
FACT_DIR = "/etc/ansible/facts.d"
RECORD_FORMAT = 1
BIG_FILE = 64 * 1024 * 1024
"""Files above this size are compared by size and mtime, not read (archives, installers, weights)."""

KINDS = ("paths", "units", "packages", "users", "groups")
UNIT_PROPERTIES = ("LoadState", "ActiveState", "UnitFileState")
"""What the record keeps of a unit: the node prints ``systemctl show`` of these, parsed here."""

# Task actions whose results name a path they wrote or read.
_PATH_ACTIONS = frozenset(
    {
        "template", "copy", "file", "lineinfile", "blockinfile", "get_url", "ini_file", "replace",
        "unarchive", "assemble", "stat", "slurp", "find", "ascend_state",
    }
)  # fmt: skip
_UNIT_ACTIONS = frozenset({"systemd", "systemd_service", "service", "systemd_unit"})
_PACKAGE_ACTIONS = frozenset({"package", "dnf", "dnf5", "yum", "apt", "dpkg_selections"})
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:~-]*$")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._:\\-]*$")
_ACCOUNT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\$?$")
_OUTSIDE = re.compile(r"\b(lookup|query|q|now)\s*\(")


# -- keys: what the runs' tasks named ---------------------------------------------------------------------


@dataclass(slots=True)
class Keys:
    """The resources a node's record watches."""

    paths: set[str] = field(default_factory=set)
    units: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)

    def update(self, other: Keys) -> None:
        for kind in KINDS:
            getattr(self, kind).update(getattr(other, kind))

    def to_json(self) -> dict[str, list[str]]:
        return {kind: sorted(getattr(self, kind)) for kind in KINDS}

    @classmethod
    def from_json(cls, data: Any) -> Keys:
        keys = cls()
        if isinstance(data, Mapping):
            for kind in KINDS:
                values = data.get(kind) or []
                if isinstance(values, list):
                    getattr(keys, kind).update(str(v) for v in values if isinstance(v, str) and v)
        return keys

    def __len__(self) -> int:
        return sum(len(getattr(self, kind)) for kind in KINDS)


def _short(action: str) -> str:
    return action.rsplit(".", 1)[-1]


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list):
        return [str(v).strip() for v in value if isinstance(v, str | int) and str(v).strip()]
    return []


def keys_of_result(action: str, res: Mapping[str, Any]) -> Keys:
    """The resources one task result (``res`` of a runner_on_ok event) names; a loop's items included."""
    keys = Keys()
    items = res.get("results")
    if isinstance(items, list):
        for item in items:
            if isinstance(item, Mapping):
                keys.update(keys_of_result(action, item))
    if res.get("failed") or res.get("skipped"):
        return keys
    short = _short(action)
    invocation = res.get("invocation")
    margs: Mapping[str, Any] = {}
    if isinstance(invocation, Mapping) and isinstance(invocation.get("module_args"), Mapping):
        margs = invocation["module_args"]
    if short in _PATH_ACTIONS:
        for name in ("dest", "path"):
            for source in (res, margs):
                value = source.get(name)
                if isinstance(value, str):
                    keys.paths.add(value)
        if short == "stat" and isinstance(res.get("stat"), Mapping) and res["stat"].get("path"):
            keys.paths.add(str(res["stat"]["path"]))
        if short == "slurp" and isinstance(res.get("source"), str):
            keys.paths.add(res["source"])
        if short in ("find", "ascend_state") and isinstance(res.get("files"), list):
            keys.paths.update(
                str(f["path"]) for f in res["files"] if isinstance(f, Mapping) and f.get("path")
            )
        if short == "ascend_state" and isinstance(res.get("stats"), Mapping):
            keys.paths.update(str(p) for p in res["stats"])
    elif short in _UNIT_ACTIONS:
        unit = res.get("name") or margs.get("name")
        if isinstance(unit, str) and _UNIT_NAME.match(unit):
            keys.units.add(unit if "." in unit else f"{unit}.service")
    elif short in _PACKAGE_ACTIONS:
        state = str(margs.get("state") or "present")
        if short == "dpkg_selections" or state in ("present", "installed", "latest"):
            keys.packages.update(n for n in _names(margs.get("name")) if _PACKAGE_NAME.match(n))
    elif short in ("user", "group"):
        account = res.get("name") or margs.get("name")
        if isinstance(account, str) and _ACCOUNT_NAME.match(account):
            (keys.users if short == "user" else keys.groups).add(account)
    keys.paths = {p for p in keys.paths if p.startswith("/") and "\n" not in p}
    return keys


# -- the fingerprint of a run's inputs --------------------------------------------------------------------


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over every file of playbooks/, roles/, plugins/, ansible.cfg and the provision package."""
    root = paths.ansible_root()
    package = Path(__file__).resolve().parents[1]
    sources = [root / "ansible.cfg"]
    for folder in (root / "playbooks", root / "roles", root / "plugins", package):
        sources += sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256(__version__.encode())
    for path in sources:
        if path.suffix in (".pyc", ".pyo"):
            continue
        digest.update(b"\0" + str(path.relative_to(path.anchor)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def reads_outside(host_vars: Mapping[str, Any]) -> str | None:
    """The first variable whose template reads outside the inventory (its value can change unseen)."""
    for name, value in host_vars.items():
        text = json.dumps(plain(value), default=str)
        if ("{{" in text or "{%" in text) and _OUTSIDE.search(text):
            return str(name)
    return None


def fingerprint(host_vars: Mapping[str, Any], *, playbook: str) -> str:
    """sha256 of what decides a node's converged state: its inventory variables, the playbook, the code."""
    payload = {"code": code_digest(), "playbook": playbook, "vars": plain(dict(host_vars))}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


# -- the node side ----------------------------------------------------------------------------------------

OBSERVE_SCRIPT = node_script("record_observe.py")

WRITE_SCRIPT = node_script("record_write.py")

_MARK = "\n@@@provision-record\n"


def observe_command(
    python: str, *, keys: Keys | None, union: bool = False, record: str = RECORD_PATH, facts: str = FACT_DIR
) -> str:
    """The node command: read the record, observe ``keys`` (the record's own when None) and print both,
    with the local facts of ``facts``."""
    spec = {
        "record": record,
        "keys": None if keys is None else keys.to_json(),
        "union": union,
        "big": BIG_FILE,
        "facts": facts,
        "unit_properties": list(UNIT_PROPERTIES),
    }
    return shlex.join([python, "-c", OBSERVE_SCRIPT, json.dumps(spec, separators=(",", ":"))])


def write_command(python: str, content: Mapping[str, Any], *, record: str = RECORD_PATH) -> str:
    data = base64.b64encode(json.dumps(content, sort_keys=True).encode()).decode()
    return shlex.join([python, "-c", WRITE_SCRIPT, record, data])


@dataclass(slots=True)
class Observation:
    record: dict[str, Any] | None
    keys: Keys
    observed: dict[str, Any]
    local: dict[str, Any] = field(default_factory=dict)
    """The node's local facts (``/etc/ansible/facts.d/*.fact``), as the setup module reads JSON ones."""


def probe_output(stdout: str) -> str:
    """What the command printed before :data:`OBSERVE_SCRIPT`'s part (the NPU probe's sections)."""
    return stdout.replace("\r\n", "\n").rpartition(_MARK)[0]


def parse_observation(stdout: str) -> Observation:
    """The JSON :data:`OBSERVE_SCRIPT` printed after its marker (anything a login shell printed before)."""
    _, sep, payload = stdout.replace("\r\n", "\n").rpartition(_MARK)
    if not sep:
        raise ValueError("no record observation in the node's output")
    data = json.loads(payload)
    record = data.get("record")
    observed = dict(data.get("observed") or {})
    if isinstance(observed.get("units"), dict):  # the node printed systemctl's text: parsed here, once
        observed["units"] = {name: unit_state(str(text)) for name, text in observed["units"].items()}
    return Observation(
        record=record if isinstance(record, dict) else None,
        keys=Keys.from_json(data.get("keys")),
        observed=observed,
        local=dict(data.get("local") or {}),
    )


def unit_state(show: str) -> dict[str, str]:
    """The record's :data:`UNIT_PROPERTIES` of a unit from its ``systemctl show`` text ("" for one not
    printed: no systemctl, or an older systemd without the property)."""
    shown = parse_show(show)
    return {name: shown.get(name, "") for name in UNIT_PROPERTIES}


NPU_FIELDS = (
    "count", "model", "bus_ids", "npu_smi", "npu_smi_error", "driver_version", "firmware_version",
    "driver_install_path", "health",
)  # fmt: skip


def npu_summary(ascend_npus: Mapping[str, Any] | None) -> dict[str, Any]:
    """What of the ``ascend_npus`` fact must stay as the record has it (not temperatures, power, usage)."""
    npus = ascend_npus or {}
    return {name: plain(npus.get(name)) for name in NPU_FIELDS}


def new_record(fp: str, observation: Observation, npus: Mapping[str, Any], written_at: str) -> dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "provision": __version__,
        "fingerprint": fp,
        "written_at": written_at,
        "keys": observation.keys.to_json(),
        "observed": observation.observed,
        "npus": dict(npus),
    }


# -- the comparison ---------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return str(value)


def _changed(label: str, was: Any, now: Any) -> str:
    if isinstance(was, Mapping) and isinstance(now, Mapping) and was.get("type") == now.get("type"):
        keys = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
        changes = "; ".join(f"{k} {_describe(was.get(k))} -> {_describe(now.get(k))}" for k in keys)
        return f"{label}: {changes}"
    if isinstance(was, Mapping) and isinstance(now, Mapping) and "type" in was:
        return f"{label}: was {was.get('type')}, now {now.get('type')}"
    return f"{label}: {_describe(was)} -> {_describe(now)}"


def drift(
    record: Mapping[str, Any] | None,
    observed: Mapping[str, Any],
    npus: Mapping[str, Any],
    fp: str,
) -> list[str]:
    """Why the node is not as its record says (empty: it is), most telling reason first."""
    if record is None:
        return ["no record of a converged apply on this node"]
    if record.get("format") != RECORD_FORMAT:
        return [f"record format {record.get('format')!r} is not {RECORD_FORMAT}"]
    if record.get("fingerprint") != fp:
        return [
            "the inputs changed since the last apply (inventory variables, playbooks, roles or provision)"
        ]
    reasons: list[str] = []
    health = npus.get("health") or {}
    sick = sorted(str(npu) for npu, state in health.items() if str(state) != "OK")
    if sick:
        reasons.append(f"NPU health: {', '.join(f'NPU {n} {health[n]}' for n in sick)}")
    before_npus = record.get("npus") or {}
    for name in NPU_FIELDS:
        if name != "health" and before_npus.get(name) != npus.get(name):
            reasons.append(_changed(f"NPUs {name}", before_npus.get(name), npus.get(name)))
    if not sick and before_npus.get("health") != npus.get("health"):
        reasons.append(_changed("NPUs health", before_npus.get("health"), npus.get("health")))
    before = record.get("observed") or {}
    for kind in (*KINDS, "system"):
        was: Mapping[str, Any] = before.get(kind) or {}
        now: Mapping[str, Any] = observed.get(kind) or {}
        for name in sorted(set(was) | set(now)):
            if was.get(name) != now.get(name):
                label = name if kind == "paths" else f"{kind.rstrip('s')} {name}"
                reasons.append(_changed(label, was.get(name), now.get(name)))
    return reasons


def serving_closure(hosts: Iterable[str], groups: Iterable[Iterable[str]]) -> set[str]:
    """``hosts`` plus every other member of a multi-node serving group one of them is in."""
    wanted = set(hosts)
    for group in groups:
        members = set(group)
        if members & wanted:
            wanted |= members
    return wanted

"""Many hosts at once: one thread per host (bounded), live progress, then one inventory update.

:func:`bootstrap_all` runs :func:`provision.bootstrap.node.bootstrap_host` on every target in a thread pool;
each host's failure stays that host's. :func:`write_inventory` then adds or updates every host that
succeeded, in one pass on the controller (see :mod:`provision.bootstrap.inventory`), and loads the result
back the way Ansible does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich import box
from rich.console import Console as RichConsole
from rich.live import Live
from rich.table import Table
from rich.text import Text

from provision.bootstrap.inventory import (
    HostEntry,
    IniText,
    host_vars_file,
    replace_block,
    update_ini,
    user_keys,
    write_atomic,
)
from provision.bootstrap.node import HostResult, Options, Report, bootstrap_host
from provision.bootstrap.ssh import Target, parse_target
from provision.errors import InputError, ProvisionError
from provision.inventory.load import load_inventory
from provision.inventory.rules import interpreter_problem
from provision.inventory.schema import FACTS_VARIABLE


def bootstrap_all(
    targets: Sequence[Target], options: Options, report: Report, parallel: int = 16
) -> list[HostResult]:
    """Every host in parallel; results in the order of ``targets``."""
    if not targets:
        return []
    with ThreadPoolExecutor(
        max_workers=max(1, min(parallel, len(targets))), thread_name_prefix="bootstrap"
    ) as pool:
        futures = [pool.submit(bootstrap_host, target, options, report) for target in targets]
        return [future.result() for future in futures]


# --- targets ---------------------------------------------------------------------------------------------


def read_hosts_file(path: Path) -> list[str]:
    """``--from`` file: one host per line (``[NAME=][USER@]ADDRESS[:PORT]``), ``#`` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--from {path}: cannot read: {exc.strerror}") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def resolve_targets(specs: Sequence[str], inventory: Path, default_port: int) -> list[Target]:
    """Parse host arguments; a bare name already in the inventory is reached at its ``ansible_host``."""
    ini = _read_ini(inventory)
    targets: list[Target] = []
    for spec in specs:
        target = parse_target(spec, default_port)
        bare = "=" not in spec and "@" not in spec and ":" not in spec
        index = ini.find_host(target.name) if bare else None
        if index is not None:
            known = ini.host_vars(index)
            address = known.get("ansible_host", target.address)
            port = int(known["ansible_port"]) if known.get("ansible_port", "").isdigit() else default_port
            target = Target(target.name, address, port)
        targets.append(target)
    seen: set[str] = set()
    for target in targets:
        if target.name in seen:
            raise InputError(f"host {target.name} is given twice")
        seen.add(target.name)
    if not targets:
        raise InputError("no hosts: give HOST arguments or --from FILE")
    return targets


def _read_ini(inventory: Path) -> IniText:
    if not inventory.exists():
        return IniText()
    return IniText.parse(inventory.read_text(encoding="utf-8"))


def check_inventory_path(inventory: Path) -> dict[str, list[str]]:
    """Before contacting any host: the inventory must be INI and load; return each host's groups."""
    if inventory.suffix.lower() in (".yml", ".yaml", ".json"):
        raise InputError(
            f"{inventory}: bootstrap writes INI inventories (comments and order are kept line by line); "
            "give an .ini file (it may be new) and list it next to your YAML one with -i"
        )
    if inventory.is_dir():
        raise InputError(f"{inventory}: give the inventory file, not a folder")
    if not inventory.exists():
        return {}
    loaded = load_inventory(inventory)
    members: dict[str, list[str]] = {}
    for group, hosts in loaded.groups.items():
        for host in hosts:
            members.setdefault(host, []).append(group)
    return members


# --- the inventory ---------------------------------------------------------------------------------------


@dataclass
class InventoryUpdate:
    changes: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    """What `provision validate` says about the written inventory (empty: fine)."""
    refused: list[str] = field(default_factory=list)
    """What a node reported that was not written, and why (a value that is no plain path)."""


def connection_vars(result: HostResult, options: Options) -> dict[str, str]:
    target = result.target
    out: dict[str, str] = {}
    if target.name != target.address:
        out["ansible_host"] = target.address
    if target.port != 22:
        out["ansible_port"] = str(target.port)
    out["ansible_user"] = options.deploy_user
    out["ansible_become"] = "true"
    out["ansible_ssh_private_key_file"] = str(options.deploy_key.path)
    python = ((result.facts or {}).get("python") or {}).get("path")
    if python and interpreter_problem(python) is None:
        out["ansible_python_interpreter"] = str(python)
    return out


def refused_interpreter(result: HostResult) -> str | None:
    """Why the python3 path the node reported is not written to the inventory, or None: Ansible templates
    the interpreter on the controller before every task, so only a plain absolute path may go there."""
    python = ((result.facts or {}).get("python") or {}).get("path")
    problem = interpreter_problem(python) if python else None
    if problem is None:
        return None
    return (
        f"{result.target.name}: ansible_python_interpreter not written: the node reported python3 at "
        f"{python!r}: it {problem}"
    )


def write_inventory(
    inventory: Path,
    results: Sequence[HostResult],
    options: Options,
    member_of: Mapping[str, Sequence[str]],
) -> InventoryUpdate:
    """Add/update every successful host: INI lines, host_vars blocks; load back and validate."""
    done = [r for r in results if r.ok and r.facts is not None]
    update = InventoryUpdate()
    if not done:
        return update
    before: dict[Path, str | None] = {}
    entries: list[HostEntry] = []
    for result in done:
        facts = result.facts or {}
        npus = facts.get("npus") or {}
        entries.append(
            HostEntry(
                name=result.target.name,
                connection=connection_vars(result, options),
                model=npus.get("model"),
                npu_count=int(npus.get("count") or 0),
                facts=facts,
            )
        )
    old_text = inventory.read_text(encoding="utf-8") if inventory.exists() else ""
    new_text, changes = update_ini(old_text, entries, options.policy.record.path.absolute(), member_of)
    before[inventory] = old_text if inventory.exists() else None
    for entry in entries:
        path = host_vars_file(inventory, entry.name)
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        block: dict[str, Any] = {}
        mine_elsewhere = user_keys(current)
        if entry.npu_count > 0 and "ascend_npu_count" not in mine_elsewhere:
            block["ascend_npu_count"] = entry.npu_count
        if FACTS_VARIABLE not in mine_elsewhere:
            block[FACTS_VARIABLE] = dict(entry.facts)
        text = replace_block(current, block)
        if text != current:
            before[path] = current if path.exists() else None
            write_atomic(path, text)
            changes.setdefault(entry.name, []).append(f"wrote {_relative(path, inventory)}")
    if new_text != old_text:
        write_atomic(inventory, new_text)
    try:
        loaded = load_inventory(inventory)
    except ProvisionError as exc:
        _restore(before)
        raise ProvisionError(
            f"{inventory}: the updated inventory did not load, so it was restored: {exc}"
        ) from None
    for entry in entries:
        if entry.name not in loaded.hosts:
            _restore(before)
            raise ProvisionError(
                f"{inventory}: {entry.name} missing after the update; restored the old files"
            )
    from provision.inventory.validate import format_issues, validate

    update.problems = format_issues(validate(loaded), inventory.parent.resolve())
    update.refused = [found for found in map(refused_interpreter, done) if found is not None]
    update.changes = {name: [f"inventory: {note}" for note in notes] for name, notes in changes.items()}
    return update


def _relative(path: Path, inventory: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(inventory.parent))
    return str(path)


def _restore(before: Mapping[Path, str | None]) -> None:
    for path, text in before.items():
        if text is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, text)


# --- progress and results ----------------------------------------------------------------------------------


class LineDisplay:
    """Progress as plain lines (not a terminal, CI): ``host  what is happening``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def __enter__(self) -> LineDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stream.flush()

    def __call__(self, host: str, what: str) -> None:
        with self._lock:
            self.stream.write(f"{host:<16} {what}\n")
            self.stream.flush()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            yield


class LiveDisplay:
    """A live table on a terminal: one row per host with what it is doing."""

    def __init__(self, console: RichConsole, hosts: Sequence[str]) -> None:
        self.state: dict[str, str] = dict.fromkeys(hosts, "waiting")
        self._lock = threading.Lock()
        self.live = Live(self._table(), console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> LiveDisplay:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.update(self._table())
        self.live.__exit__(None, None, None)

    def __call__(self, host: str, what: str) -> None:
        with self._lock:
            self.state[host] = what
            self.live.update(self._table())

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            self.live.stop()
            try:
                yield
            finally:
                self.live.start()

    def _table(self) -> Table:
        table = Table(title="bootstrap", title_justify="left")
        table.add_column("host")
        table.add_column("now")
        for host, what in self.state.items():
            style = "red" if what == "failed" else ("green" if what == "done" else None)
            table.add_row(Text(host), Text(what), style=style)
        return table


def result_table(
    results: Sequence[HostResult], inventory_changes: Mapping[str, list[str]], *, ascii_only: bool
) -> Table:
    table = Table(title="BOOTSTRAP", title_justify="left", box=box.ASCII if ascii_only else box.HEAVY_HEAD)
    for column in ("host", "address", "result", "host key", "NPUs", "details"):
        table.add_column(column)
    for result in results:
        target = result.target
        address = target.address if target.port == 22 else f"{target.address}:{target.port}"
        npus = "-"
        if result.facts:
            count = result.facts["npus"]["count"]
            npus = f"{count} x {result.facts['npus']['model']}" if count else "none"
        if result.error is not None:
            status, details, style = f"FAILED: {result.error.kind}", _first_line(str(result.error)), "red"
        else:
            changes = [*result.changes, *inventory_changes.get(target.name, [])]
            status = "changed" if changes else "no change"
            details = "; ".join(changes) if changes else "already bootstrapped; inventory up to date"
            style = None
        cells = (target.name, address, status, result.fingerprint or "-", npus, details)
        table.add_row(*(Text(cell) for cell in cells), style=style)
    return table


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""

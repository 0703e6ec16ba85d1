"""The only code that talks to Ansible at run time: ansible-runner, its events, and the run directory.

``run_playbook()`` runs one playbook with our ansible.cfg (pipelining, ControlPersist), feeds each event to
an observer (the live display) and returns a :class:`RunResult` built from the events: per-host counts,
failures with their messages, and the changes (with diffs) that plan shows. ``run_module()`` runs one
module ad hoc (``provision serve status INVENTORY``) in the same environment.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from provision import paths
from provision.errors import EnvironmentProblem
from provision.runner.environment import confine, refuse_secrets
from provision.runner.events import Event, Observer
from provision.runner.options import AnsibleOptions, ExtraVars, extra_vars_args, private_folder
from provision.runner.unreachable import classify

# Seconds Mitogen may take to connect AND start its interpreter on a node (Ansible's `timeout`).
MITOGEN_CONNECT_TIMEOUT = "60"

# ansible-playbook exit codes that mean "bad input", not "a host failed".
_BAD_INPUT_RC = {4, 5}

# provision's exit codes for a run (docs/ansible.md, "Exit codes"). ansible-playbook's are 2 for a failed
# host and 4 for an unreachable one; 2 is provision's "bad input, nothing touched" on every verb (and
# click's usage error), so a failed host stays 1 and only unreachable takes Ansible's number.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 4


@dataclass(slots=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def healthy(self) -> bool:
        return self.failed == 0 and self.unreachable == 0

    @property
    def state(self) -> str:
        """``ok``, ``failed`` or ``unreachable`` (a host that failed a task, then was lost, is unreachable:
        what it did last is unknown)."""
        if self.unreachable:
            return "unreachable"
        return "failed" if self.failed else "ok"


@dataclass(slots=True)
class Failure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass(slots=True)
class Change:
    host: str
    task: str
    action: str
    diff: str = ""
    detail: str = ""
    """What a change without a diff says it does (its ``msg``), e.g. check mode's "would install: ..."."""


@dataclass(slots=True)
class RunResult:
    playbook: str
    rc: int
    status: str
    run_dir: Path
    seconds: float
    check: bool
    hosts: dict[str, HostStats] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    endpoints: list[ServedEndpoint] = field(default_factory=list)
    """The serving instances the health gate (``vllm_health``) last saw in this run, one per host and pool."""
    links: list[dict[str, Any]] = field(default_factory=list)
    """What the HCCN gate's bandwidth check measured (hccl_test), one per NPU pair
    (``provision.ascend.hccl_check.link_figures``)."""
    verified: dict[str, str] = field(default_factory=dict)
    """Hosts an apply found as their record says (no site.yml run for them): host -> when recorded."""
    drift: dict[str, list[str]] = field(default_factory=dict)
    """Hosts an apply compared with their record and ran site.yml on: host -> why."""
    recorded: list[str] = field(default_factory=list)
    """Hosts whose record this apply wrote."""
    record_failures: list[str] = field(default_factory=list)
    """``host: message`` where the record could not be written (the next apply runs site.yml there)."""
    listing: str = ""
    """What ansible-playbook printed for ``--list-hosts`` / ``--list-tasks`` (nothing ran)."""

    @property
    def converged(self) -> list[str]:
        """Hosts an apply ran site.yml on (``drift``) that came out ok."""
        return sorted(h for h in self.drift if h in self.hosts and self.hosts[h].healthy)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and all(s.healthy for s in self.hosts.values())

    @property
    def unreachable(self) -> dict[str, str]:
        """Hosts not reached -> what failed (connection refused, timed out, host key, ...)."""
        found = {host: "" for host, stats in self.hosts.items() if stats.state == "unreachable"}
        for failure in self.failures:
            if failure.unreachable and failure.host in found and not found[failure.host]:
                found[failure.host] = failure.message
        return dict(sorted(found.items()))

    @property
    def failed(self) -> list[str]:
        """Hosts reached where a task failed."""
        return sorted(host for host, stats in self.hosts.items() if stats.state == "failed")

    @property
    def exit_code(self) -> int:
        """0 ok; 1 a host failed (or Ansible stopped); 2 bad input (ansible-playbook's syntax/option errors,
        no host reached); 4 every host that is not ok was unreachable (the others did their work)."""
        if self.ok:
            return EXIT_OK
        # rc 4 is also "unreachable host"; it means bad input only when no host was reached at all.
        if self.rc in _BAD_INPUT_RC and not self.hosts:
            return EXIT_BAD_INPUT
        if self.unreachable and not self.failed:
            return EXIT_UNREACHABLE
        return EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "ansible_rc": self.rc,
            "status": self.status,
            "check": self.check,
            "run_dir": str(self.run_dir),
            "seconds": round(self.seconds, 2),
            "hosts": {h: {**asdict(s), "result": s.state} for h, s in sorted(self.hosts.items())},
            "unreachable": self.unreachable,
            "failed": self.failed,
            "failures": [asdict(f) for f in self.failures],
            "changes": [asdict(c) for c in self.changes],
            "endpoints": [asdict(e) for e in self.endpoints],
            "links": self.links,
            "verified": dict(sorted(self.verified.items())),
            "drift": dict(sorted(self.drift.items())),
            "converged": self.converged,
            "recorded": self.recorded,
            "record_failures": self.record_failures,
            **({"listing": self.listing} if self.listing else {}),
        }


def runs_root() -> Path:
    """Where run directories go: ``$PROVISION_RUNS_DIR`` or ``$XDG_STATE_HOME/provision/runs``."""
    configured = os.environ.get("PROVISION_RUNS_DIR")
    if configured:
        return Path(configured)
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "provision" / "runs"


def new_run_dir(verb: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = runs_root() / f"{stamp}-{verb}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def _search_path() -> str:
    """PATH with this Python's bin folder first, so the ansible-playbook of our venv runs (unactivated)."""
    here = str(Path(sys.executable).parent)
    return os.pathsep.join([here, os.environ.get("PATH", "")])


def strategy_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ansible settings for the strategy: Mitogen's ``mitogen_linear`` when it is installed, else Ansible's.

    Mitogen keeps one Python interpreter per node for the whole run (no AnsiballZ upload and no fresh
    interpreter per task): a no-op converge costs the nodes a fraction of the CPU. Its SSH connection keeps
    host key checking on (``StrictHostKeyChecking yes`` against the inventory's known_hosts). Only
    ``provision`` uses it; the roles run unchanged under plain ``ansible-playbook``.
    ``PROVISION_STRATEGY=linear`` (or ``free``) asks for one of Ansible's own; a strategy the user already
    set through ``ANSIBLE_STRATEGY`` or the ``strategy`` of their own ansible.cfg is kept.
    """
    from provision.ansible_config import user_sets

    environ = os.environ if environ is None else environ
    wanted = environ.get("PROVISION_STRATEGY", "").strip()
    if "ANSIBLE_STRATEGY" in environ and not wanted:
        return {}
    if not wanted and user_sets(("defaults", "strategy"), environ):
        return {}  # the strategy of the user's own ansible.cfg (provision.ansible_config)
    if wanted and not wanted.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": wanted}
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None:
        if wanted:
            raise EnvironmentProblem(
                f"PROVISION_STRATEGY={wanted} needs Mitogen, which is not installed: pip install mitogen"
            )
        return {}  # not installed: Ansible's linear strategy, same behaviour, slower
    plugins = Path(spec.origin).parent / "plugins" / "strategy"
    settings = {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": wanted or "mitogen_linear"}
    if "ANSIBLE_TIMEOUT" not in environ:
        # Mitogen's connect timeout covers the whole bootstrap (ssh, then the node's Python starting and
        # receiving Mitogen), not only the SSH handshake: Ansible's 10 s is too short for many nodes at once
        # on a loaded controller.
        settings["ANSIBLE_TIMEOUT"] = MITOGEN_CONNECT_TIMEOUT
    return settings


DEFAULT_COLLECTIONS_PATH = "~/.ansible/collections:/usr/share/ansible/collections"


def user_collections() -> str:
    """The user's collections path (theirs, else Ansible's default), which follows provision's own."""
    from provision.ansible_config import user_collections_path

    return user_collections_path() or DEFAULT_COLLECTIONS_PATH


def ansible_env() -> dict[str, str]:
    """The environment of every Ansible run provision starts: the user's ansible.cfg over provision's
    (:mod:`provision.ansible_config`), its collection first on the collections path (then the user's), plain
    output, and host key checking on."""
    from provision.ansible_config import config_env, python_warnings

    return {
        **config_env(),
        "PYTHONWARNINGS": python_warnings(os.environ),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(paths.collections_path()), user_collections()]),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONUNBUFFERED": "1",
        "PATH": _search_path(),
        # ansible-runner turns host key checking off unless told; config_env refused a setting turning it off.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }


Sources = Path | Sequence[Path]
"""An inventory: one source, or several (``-i`` repeated)."""


def _inventory_arg(inventory: Sources) -> str | list[str]:
    if isinstance(inventory, Path):
        return str(inventory.resolve())
    return [str(source.resolve()) for source in inventory]


def run_playbook(
    playbook: str,
    inventory: Sources,
    *,
    verb: str = "apply",
    limit: str | None = None,
    tags: str | None = None,
    skip_tags: str | None = None,
    extra_vars: ExtraVars = (),
    check: bool = False,
    diff: bool = False,
    forks: int | None = None,
    verbosity: int = 0,
    observer: Observer | None = None,
    env: Mapping[str, str] | None = None,
    options: AnsibleOptions | None = None,
) -> RunResult:
    """Run ``playbooks/<playbook>`` against ``inventory`` through ansible-runner; no secret of ``extra_vars``
    or ``options`` is written into the run directory (see :mod:`provision.runner.options`), and of the
    environment only the allow-list of :mod:`provision.runner.environment` reaches the run."""
    refuse_secrets()
    options = options or AnsibleOptions()
    with private_folder() as private:
        result = _run_playbook(
            playbook, inventory, verb=verb, limit=limit, tags=tags, skip_tags=skip_tags,
            cmdline=[*extra_vars_args(extra_vars, private), *options.args(private)], check=check,
            diff=diff, forks=forks, verbosity=verbosity, observer=observer,
            env={**options.env(), **(env or {})},
        )  # fmt: skip
    if options.lists:
        result.listing = _stdout(result.run_dir).strip("\n")
    return result


def _run_playbook(
    playbook: str,
    inventory: Sources,
    *,
    verb: str,
    limit: str | None,
    tags: str | None,
    skip_tags: str | None,
    cmdline: list[str],
    check: bool,
    diff: bool,
    forks: int | None,
    verbosity: int,
    observer: Observer | None,
    env: Mapping[str, str],
) -> RunResult:
    import ansible_runner

    run_dir = new_run_dir(verb)
    collector = _Collector(observer)
    cmdline = list(cmdline)
    if check:
        cmdline.append("--check")
    if diff:
        cmdline.append("--diff")
    if skip_tags:
        cmdline += ["--skip-tags", skip_tags]
    envvars = {**ansible_env(), **strategy_settings(), **env}
    started = time.monotonic()
    kwargs: dict[str, Any] = {
        "private_data_dir": str(run_dir),
        "playbook": str(paths.playbook(playbook)),
        "inventory": _inventory_arg(inventory),
        "envvars": envvars,
        "event_handler": collector.handle,
        "status_handler": confine(envvars),
        "quiet": True,
        "verbosity": verbosity or None,
        # No env/ copies of what the run is given: its command line names files, never secrets, and it is
        # kept anyway (artifacts/<ident>/command).
        "suppress_env_files": True,
        # ansible.cfg's fact_caching (memory: facts live for the run), not runner's default of a JSON file
        # per host in the run directory, rewritten at every fact a task sets.
        "fact_cache_type": "memory",
    }
    if limit:
        kwargs["limit"] = limit
    if tags:
        kwargs["tags"] = tags
    if forks:
        kwargs["forks"] = forks
    if cmdline:
        kwargs["cmdline"] = shlex.join(cmdline)
    runner = ansible_runner.run(**kwargs)
    seconds = time.monotonic() - started
    rc = int(runner.rc if runner.rc is not None else 1)
    result = RunResult(
        playbook=playbook,
        rc=rc,
        status=str(runner.status),
        run_dir=run_dir,
        seconds=seconds,
        check=check,
        hosts=collector.hosts,
        failures=collector.failures,
        changes=collector.changes,
        endpoints=[collector.endpoints[key] for key in sorted(collector.endpoints)],
        links=collector.links,
    )
    if rc != 0 and not result.failures and not result.hosts:
        # ansible-playbook stopped before any host (syntax error, bad option): keep its words.
        text = _stdout(run_dir).strip()
        result.failures.append(Failure("-", "ansible-playbook", _last_lines(text, 15) or runner.status))
    return result


@dataclass(frozen=True, slots=True)
class ModuleRun:
    rc: int
    status: str
    stdout: str
    """Ansible's output when the run failed (read before its run directory went), else empty."""


def run_module(
    module: str,
    inventory: Sources,
    *,
    host_pattern: str,
    module_args: str = "",
    limit: str | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    verb: str = "adhoc",
    observer: Observer | None = None,
    options: AnsibleOptions | None = None,
) -> ModuleRun:
    """Run ``module`` ad hoc on ``host_pattern`` of ``inventory`` through ansible-runner, each event to
    ``observer``; the module's results are in the events.

    The run directory is a throw-away one, removed before this returns: an ad-hoc run is a read-only probe,
    and the extra variables given to it (an API key) must not stay on disk.
    """
    import ansible_runner

    def handle(event: Event) -> bool:
        if observer is not None:
            observer(event)
        return True

    refuse_secrets()
    options = options or AnsibleOptions()
    envvars = {**ansible_env(), **options.env()}
    with tempfile.TemporaryDirectory(prefix=f"provision-{verb}-") as private, private_folder() as secrets:
        args = options.args(secrets)
        runner = ansible_runner.run(
            private_data_dir=private,
            inventory=_inventory_arg(inventory),
            host_pattern=host_pattern,
            module=module,
            module_args=module_args,
            limit=limit,
            extravars=dict(extra_vars or {}),
            envvars=envvars,
            cmdline=shlex.join(args) if args else None,
            event_handler=handle,
            status_handler=confine(envvars),
            quiet=True,
        )
        rc = int(runner.rc if runner.rc is not None else 1)
        return ModuleRun(rc=rc, status=str(runner.status), stdout=_stdout(Path(private)) if rc else "")


def _stdout(run_dir: Path) -> str:
    """What ansible printed in a run directory (ansible-runner keeps it in artifacts/<ident>/stdout)."""
    return "\n".join(p.read_text(errors="replace") for p in (run_dir / "artifacts").glob("*/stdout"))


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.splitlines()[-count:])


@dataclass(frozen=True)
class ServedEndpoint:
    host: str
    pool: str
    url: str
    model: str | None
    state: str
    ready: bool
    api_key: bool
    """The instance wants ``Authorization: Bearer <vllm_serve_api_key>``."""
    role: str = "single"
    """``single``, or in a multi-node serving group ``head`` (the API) or ``worker`` (headless, no API)."""
    hosts: list[str] = field(default_factory=list)
    """The nodes of its multi-node serving group, head first (empty for a single-node instance)."""


_ENDPOINT_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_item_on_ok", "runner_item_on_failed")


def _served(host: str, item: Mapping[str, Any]) -> ServedEndpoint:
    return ServedEndpoint(
        host=host,
        pool=str(item.get("pool", "")),
        url=str(item.get("url", "")),
        model=item.get("model"),
        state=str(item.get("state", "")),
        ready=bool(item.get("ready")),
        api_key=bool(item.get("api_key")),
        role=str(item.get("role") or "single"),
        hosts=[str(h) for h in item.get("hosts") or []],
    )


class _Collector:
    """Turns runner events into counts, failures and changes; forwards each event to the observer."""

    def __init__(self, observer: Observer | None) -> None:
        self.observer = observer
        self.hosts: dict[str, HostStats] = {}
        self.failures: list[Failure] = []
        self.changes: list[Change] = []
        self.endpoints: dict[tuple[str, str], ServedEndpoint] = {}
        self.links: list[dict[str, Any]] = []

    def handle(self, event: Event) -> bool:
        kind = event.get("event", "")
        data: Mapping[str, Any] = event.get("event_data") or {}
        host = data.get("host")
        if host:
            self.hosts.setdefault(host, HostStats())
        res: Mapping[str, Any] = data.get("res") or {}
        task = _task_name(data)
        if kind == "runner_on_ok" and host and res.get("changed"):
            diff = render_diff(res)
            message = res.get("msg")
            detail = str(message) if isinstance(message, str) and not diff else ""
            self.changes.append(Change(host, task, str(data.get("task_action", "")), diff, detail))
        elif kind == "runner_on_failed" and host and not data.get("ignore_errors"):
            self.failures.append(Failure(host, task, failure_message(res)))
        elif kind == "runner_on_unreachable" and host:
            reason = str(classify(failure_message(res)))
            self.failures.append(Failure(host, task, reason, unreachable=True))
        elif kind == "playbook_on_stats":
            self._stats(data)
        # The gate's results, also of each item of a looped gate (multi-node heads: group_gate.yml).
        if kind in _ENDPOINT_EVENTS and host and isinstance(res.get("endpoints"), list):
            for item in res["endpoints"]:
                if isinstance(item, Mapping):
                    served = _served(host, item)
                    self.endpoints[(host, served.pool)] = served
        # The HCCN gate's bandwidth check (hccn_probe with links): the figures of each NPU pair.
        if kind == "runner_on_ok" and host and isinstance(res.get("links"), list):
            self.links += [dict(item) for item in res["links"] if isinstance(item, Mapping)]
        if self.observer is not None:
            self.observer(event)
        return True

    def _stats(self, data: Mapping[str, Any]) -> None:
        fields = {
            "ok": "ok",
            "changed": "changed",
            "failures": "failed",
            "dark": "unreachable",
            "skipped": "skipped",
            "rescued": "rescued",
            "ignored": "ignored",
        }
        for key, attr in fields.items():
            for host, count in (data.get(key) or {}).items():
                setattr(self.hosts.setdefault(host, HostStats()), attr, int(count))
        for host in data.get("processed") or {}:
            self.hosts.setdefault(host, HostStats())


def _task_name(data: Mapping[str, Any]) -> str:
    task = str(data.get("task") or data.get("name") or "")
    role = data.get("role")
    return f"{role} : {task}" if role and not task.startswith(f"{role} :") else task


def failure_message(res: Mapping[str, Any]) -> str:
    """The most useful words of a failed result: msg, then stderr/stdout tails."""
    parts: list[str] = []
    items = [r for r in res.get("results") or [] if isinstance(r, Mapping) and r.get("failed")]
    for item in items:  # a loop: say which items failed and why
        label = item.get("_ansible_item_label", item.get("item"))
        parts.append(f"[{label}] {failure_message(item)}")
    if parts:
        return "\n".join(parts)
    msg = res.get("msg")
    if msg:
        parts.append(str(msg).strip())
    for key in ("stderr", "stdout"):
        text = str(res.get(key) or "").strip()
        if text and text not in parts:
            parts.append(_last_lines(text, 8))
            break
    return "\n".join(parts) or "failed (no message)"


def render_diff(res: Mapping[str, Any]) -> str:
    """A unified diff from a module's ``diff`` result (one dict or a list of them)."""
    diffs = res.get("diff")
    if not diffs:
        return ""
    if isinstance(diffs, Mapping):
        diffs = [diffs]
    out: list[str] = []
    for item in diffs:
        if not isinstance(item, Mapping):
            continue
        if "prepared" in item:
            out.append(str(item["prepared"]).rstrip())
            continue
        before, after = item.get("before", ""), item.get("after", "")
        if isinstance(before, Mapping) or isinstance(after, Mapping):
            before, after = _yamlish(before), _yamlish(after)
        lines = difflib.unified_diff(
            str(before).splitlines(),
            str(after).splitlines(),
            fromfile=str(item.get("before_header", "before")),
            tofile=str(item.get("after_header", "after")),
            lineterm="",
        )
        out.append("\n".join(lines))
    return "\n".join(line for line in out if line)


def _yamlish(value: Any) -> str:
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {v}" for k, v in value.items())
    return str(value)

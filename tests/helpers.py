"""The one home of what several test modules need: the `provision` CLI (in a subprocess, with its --json
summary, or in this process), inventories, commands on simulated nodes, completion requests, samples."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
import typer
import yaml

from provision.paths import ansible_root

if TYPE_CHECKING:
    from provision_sim.cluster import Cluster

PROVISION = [sys.executable, "-m", "provision"]
SAMPLES = Path(__file__).parent / "fixtures" / "samples"


@dataclass
class Run:
    """One ``provision ... --json`` run: exit code, the JSON summary, stderr (the progress), duration."""

    rc: int
    summary: dict[str, Any]
    stderr: str
    seconds: float

    @property
    def run_dir(self) -> Path:
        return Path(self.summary["run_dir"])

    def changed(self) -> dict[str, int]:
        return {host: stats["changed"] for host, stats in self.summary["hosts"].items()}

    def changes(self, host: str) -> list[dict[str, Any]]:
        return [change for change in self.summary["changes"] if change["host"] == host]

    def tasks(self, host: str) -> list[str]:
        """Names of the tasks that changed (would change, in check mode) something on ``host``."""
        return [change["task"] for change in self.changes(host)]

    def diff(self, host: str, task: str) -> str:
        diffs = [change["diff"] for change in self.changes(host) if change["task"] == task]
        assert diffs, f"{host}: no change {task!r} in {self.tasks(host)}"
        return "\n".join(diffs)

    def failures(self) -> dict[str, str]:
        return {f["host"]: f"{f['task']}: {f['message']}" for f in self.summary["failures"]}

    def events(self, task: str) -> dict[str, dict[str, Any]]:
        """host -> ``event_data`` of the task's last ``runner_on_ok`` (from the run directory)."""
        found: dict[str, dict[str, Any]] = {}
        paths = self.run_dir.glob("artifacts/*/job_events/*.json")
        for path in sorted(paths, key=lambda p: int(p.name.split("-", 1)[0])):
            event = json.loads(path.read_text())
            data = event.get("event_data") or {}
            name = f"{data['role']} : {data.get('task')}" if data.get("role") else data.get("task")
            if event.get("event") == "runner_on_ok" and name == task:
                found[data["host"]] = data
        return found

    def results(self, task: str) -> dict[str, dict[str, Any]]:
        """host -> ``res`` of the task's last ``runner_on_ok``."""
        return {host: data.get("res") or {} for host, data in self.events(task).items()}

    def explain(self) -> str:
        shown = {key: self.summary.get(key) for key in ("hosts", "failures")}
        return json.dumps(shown, indent=1) + "\n" + self.stderr[-3000:]


# -- the CLI in a subprocess ---------------------------------------------------------------------------------


def provision_cli(*args: str, runs: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`python -m provision ARGS` as CI runs it (``CI=1``: progress as lines), runs kept in ``runs``; any exit
    code is returned."""
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": str(runs)}
    return subprocess.run(
        [*PROVISION, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def json_summary(done: subprocess.CompletedProcess[str], what: str = "provision") -> dict[str, Any]:
    """The ``--json`` summary of a run that must have exited 0."""
    assert done.returncode == 0, f"{what}: rc {done.returncode}\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def provision_ok(*args: str, runs: Path, timeout: float = 900) -> dict[str, Any]:
    """The summary of `provision ARGS --json`, which must exit 0."""
    return json_summary(provision_cli(*args, "--json", runs=runs, timeout=timeout), " ".join(args))


def provision(verb: str, inventory: Path, *args: str, timeout: float = 900) -> Run:
    """`provision VERB INVENTORY ARGS --json`, runs kept beside the inventory; no JSON fails the test."""
    started = time.monotonic()
    runs = inventory.parent / "runs"
    done = provision_cli(verb, str(inventory), "--json", *args, runs=runs, timeout=timeout)
    seconds = time.monotonic() - started
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        pytest.fail(
            f"provision {verb} {' '.join(args)} printed no JSON (rc {done.returncode}):\n{done.stderr}"
        )
    return Run(done.returncode, summary, done.stderr, seconds)


@functools.cache
def installed_collection() -> Path:
    """The collection provision.ascend installed from the checkout as a plain Ansible user installs it
    (``ansible-galaxy collection install .``), once per session: the collections folder it went to."""
    target = Path(tempfile.mkdtemp(prefix="provision-collection-"))
    atexit.register(shutil.rmtree, target, True)
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    done = subprocess.run(
        [str(galaxy), "collection", "install", "--offline", "-p", str(target), str(ansible_root())],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def plain_ansible_env() -> dict[str, str]:
    """The environment of a plain Ansible user: none of our ANSIBLE_* variables, the installed collection on
    the collections path (``plain_ansible_playbook`` moves it into the user's own ansible.cfg)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    return {**env, "ANSIBLE_COLLECTIONS_PATH": str(installed_collection()), "ANSIBLE_NOCOLOR": "1"}


def plain_ansible_playbook(
    inventory: Path, playbook: str, *args: str, home: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook -i INVENTORY PLAYBOOK ARGS`` as a user who installed the collection runs it: from an
    empty project directory outside the checkout (``home``/project) whose minimal ansible.cfg of their own
    names only the collections path, with ``HOME`` = ``home`` (no ~/.ansible.cfg of whoever runs the tests)
    and none of our ANSIBLE_* variables. Any exit code is returned."""
    project = home / "project"
    project.mkdir(parents=True, exist_ok=True)
    env = plain_ansible_env()
    collections = env.pop("ANSIBLE_COLLECTIONS_PATH")
    (project / "ansible.cfg").write_text(f"[defaults]\ncollections_path = {collections}\n")
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), playbook, *args]
    return subprocess.run(
        argv,
        cwd=project,
        capture_output=True,
        text=True,
        env={**env, "HOME": str(home)},
        timeout=timeout,
        check=False,
    )


def complete(
    url: str,
    *,
    api_key: str | None = None,
    prompt: str = "The capital of France is",
    timeout: float = 60.0,
    max_tokens: int = 4,
) -> str:
    """The text of a real completion (``max_tokens``, greedy) from the SmolLM2 endpoint at ``url``."""
    payload = {"model": "smollm2", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text: str = json.load(response)["choices"][0]["text"]
    return text


class Traffic:
    """Completions sent round-robin to ``urls`` while something runs (``with Traffic(...) as t:``): bounded in
    count (``max_requests``) and in time (``max_s``), one every ``pause_s``, to the given addresses only."""

    def __init__(
        self,
        urls: list[str],
        *,
        api_key: str | None = None,
        max_requests: int = 1000,
        max_s: float = 420.0,
        pause_s: float = 1.0,
    ) -> None:
        self.urls = urls
        self.api_key = api_key
        self.max_requests, self.max_s, self.pause_s = max_requests, max_s, pause_s
        self.results: list[tuple[str, bool, str]] = []
        self.capped = False  # stopped by its bounds before the block ended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        while not self._stop.is_set():
            if len(self.results) >= self.max_requests or time.monotonic() > deadline:
                self.capped = True
                break
            url = self.urls[len(self.results) % len(self.urls)]
            try:
                complete(url, api_key=self.api_key, prompt="Hello", timeout=15)
                self.results.append((url, True, "ok"))
            except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
                self.results.append((url, False, str(exc)))
            self._stop.wait(self.pause_s)

    def of(self, url: str) -> list[tuple[str, bool, str]]:
        return [result for result in self.results if result[0] == url]


class CountingListener:
    """A TCP port on loopback that accepts each connection, counts it and closes it at once (before any SSH
    banner): what an SSH client sees of a host whose sshd is gone, and how many times it was tried.
    ``with CountingListener() as ghost: ... ghost.port ... ghost.count``."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.port: int = self._socket.getsockname()[1]
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> CountingListener:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.count += 1
            connection.close()


# -- inventories ---------------------------------------------------------------------------------------------


def host_vars(inventory: Path, host: str, values: Mapping[str, Any] | None) -> None:
    """Write ``host_vars/<host>.yml`` beside the inventory, or remove it (``None``)."""
    path = inventory.parent / "host_vars" / f"{host}.yml"
    if values is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(dict(values)))


def copy_inventory(cluster: Cluster, folder: Path, group_vars: Mapping[str, Any] | None = None) -> Path:
    """The cluster's inventory copied into ``folder`` (beside it group_vars/ and host_vars/), with
    ``group_vars`` as group_vars/npu_nodes.yml when given; returns the copy's path. Safe to call again."""
    (folder / "group_vars").mkdir(parents=True, exist_ok=True)
    (folder / "host_vars").mkdir(exist_ok=True)
    shutil.copy(cluster.inventory_path, folder / "inventory.ini")
    if group_vars is not None:
        (folder / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(dict(group_vars)))
    return folder / "inventory.ini"


def mirror_vars(cluster: Cluster) -> dict[str, Any]:
    """The cluster's own group_vars: where its local mirror is."""
    values: dict[str, Any] = yaml.safe_load(cluster.group_vars_path.read_text())
    return values


def cluster_vars(cluster: Cluster, **settings: Any) -> dict[str, Any]:
    """The cluster's mirror variables with ``settings`` added. Each node's NPU count is the inventory's
    (``provision sim up`` writes ``ascend_npu_count`` on every host line), so these tests converge on the
    inventory the simulator writes, as a user's would."""
    return {**mirror_vars(cluster), **settings}


def localhost_inventory(folder: Path, group_vars: Mapping[str, Any]) -> Path:
    """An inventory of this machine (local connection, this interpreter) in ``folder``, ``group_vars`` as
    group_vars/npu_nodes.yml; returns its path."""
    (folder / "group_vars").mkdir()
    (folder / "group_vars" / "npu_nodes.yml").write_text(json.dumps(dict(group_vars)))
    inventory = folder / "inventory.ini"
    inventory.write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    return inventory


# -- simulated nodes -----------------------------------------------------------------------------------------


def shell(
    cluster: Cluster, node: str, script: str, *, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``sh -c SCRIPT`` inside ``node``; with ``check``, a non-zero exit fails the test with its output."""
    done = cluster.exec(node, ["sh", "-c", script], timeout=timeout)
    if check:
        assert done.returncode == 0, f"{node}: {script}\n{done.stdout}{done.stderr}"
    return done


def sh(cluster: Cluster, node: str, script: str, *, timeout: float = 120) -> str:
    """The stdout of ``sh -c SCRIPT`` inside ``node``, which must exit 0."""
    return shell(cluster, node, script, timeout=timeout).stdout


def exists(cluster: Cluster, node: str, path: str) -> bool:
    return cluster.exec(node, ["test", "-e", path]).returncode == 0


def journals(cluster: Cluster, unit: str, lines: int = 40) -> str:
    """The last ``lines`` of ``unit``'s journal on every node (to explain a failure)."""
    out = []
    for node in cluster.nodes:
        done = cluster.exec(node.name, ["journalctl", "-u", unit, "-n", str(lines), "--no-pager"])
        out.append(f"\n--- {node.name}: journal of {unit} ---\n{done.stdout}{done.stderr}")
    return "".join(out)


def assert_status_reads_node2_killed(
    status: Callable[..., subprocess.CompletedProcess[str]], unit: str, urls: Mapping[str, str], ended: str
) -> None:
    """``provision serve status`` (``status(*args)`` runs it) of a 2-node pool ``smol`` whose engine on node2
    was just SIGKILLed: exit 1, node1 ready, node2 failed with its unit's state and ``ended`` (how the
    journal words the engine's end) among the journal lines shown; ``--json`` says the same."""
    shown = status()
    assert shown.returncode == 1, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    node1 = next(line for line in lines if line.startswith("node1 "))
    node2 = next(line for line in lines if line.startswith("node2 "))
    assert node1.split()[:4] == ["node1", "smol", urls["node1"], "ready"]
    assert node2.split()[:4] == ["node2", "smol", urls["node2"], "failed"]
    # After SIGKILL of the main process systemd first stops the unit's other processes (deactivating/
    # stop-sigterm), then waits RestartSec (activating/auto-restart): either is right.
    assert "the engine process is not running" in node2
    assert re.search(rf"{re.escape(unit)}: (deactivating/stop-sig(term|kill)|activating/auto-restart)", node2)
    assert any(ended in line for line in lines if "| " in line), lines
    assert lines[-1] == "1/2 ready on 2 host(s)"

    report = json.loads(status("--json").stdout)
    assert report["ready"] is False
    states = {(row["host"], row["pool"]): row["state"] for row in report["endpoints"]}
    assert states == {("node1", "smol"): "ready", ("node2", "smol"): "failed"}


# -- the CLI in this process ---------------------------------------------------------------------------------

GOOD_INI = """\
[npu_nodes]
node1 ansible_host=192.0.2.11
node2 ansible_host=192.0.2.12
"""

VALIDATE_INI = "[npu_nodes]\nnode1 ansible_host=192.0.2.11\n"
# The engines of these inventories listen on node1's address, which needs an API key (or an explicit
# opt-out): every inventory that serves carries one, as a careful operator's does (the rule itself:
# tests/unit/test_listeners.py).
TEST_API_KEY = "unit-test-key"
API_KEY_VARS = f"vllm_serve_api_key: {TEST_API_KEY}\n"


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`provision ARGS` in this process; its exit code."""
    from provision.cli import main

    monkeypatch.setattr("sys.argv", ["provision", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    code = exit_info.value.code
    return int(code) if isinstance(code, int) else 0


def cli_app(register: Callable[[typer.Typer], None]) -> typer.Typer:
    """A bare typer app with only the commands ``register`` adds (for typer's CliRunner)."""
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """provision"""

    register(app)
    return app


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """``files`` (name -> dedented text) under ``root``; returns the inventory among them."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root / ("inventory.yml" if "inventory.yml" in files else "inventory.ini")


def validate(tmp_path: Path, group_vars: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """`provision validate` (in this process) of a one-host inventory whose group_vars are ``group_vars``
    (dedented YAML); returns the exit code."""
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(textwrap.dedent(group_vars))
    (tmp_path / "group_vars" / "all.yml").write_text(API_KEY_VARS)
    (tmp_path / "inventory.ini").write_text(VALIDATE_INI)
    return run_cli(["validate", str(tmp_path / "inventory.ini")], monkeypatch)


# -- files and the machine -----------------------------------------------------------------------------------


def load_module(name: str, path: Path) -> ModuleType:
    """The Python file at ``path`` (a plugin, a script) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up here
    spec.loader.exec_module(module)
    return module


def without_comments(text: str) -> str:
    """``text`` without its ``#`` lines (a sample's SOURCE and comment lines)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def sample(name: str) -> str:
    """A sample's tool output (tests/fixtures/samples) without its SOURCE/comment lines."""
    return without_comments((SAMPLES / name).read_text(encoding="utf-8"))


def sample_segments(name: str, *, skip_missing: bool = False) -> list[str]:
    """The verbatim parts of a sample file: runs of non-comment lines, blank edges trimmed. A missing file
    skips the test with ``skip_missing``."""
    path = SAMPLES / name
    if skip_missing and not path.is_file():
        pytest.skip(f"sample {name} not available")
    groups: list[list[str]] = [[]]
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("#"):
            groups.append([])
        else:
            groups[-1].append(line)
    out = []
    for group in groups:
        text = "\n".join(group).strip("\n")
        if text.strip():
            out.append(text + "\n")
    return out


@dataclass(frozen=True)
class FaultLog:
    """One block of tests/fixtures/samples/ascend_fault_logs.txt: verbatim log lines of one public source."""

    failure: str
    source: str
    lines: tuple[str, ...]


def fault_logs(name: str = "ascend_fault_logs.txt") -> list[FaultLog]:
    """The blocks of a fault-log sample: ``# === <failure id> ===``, ``# SOURCE: <url>``, then the lines."""
    blocks: list[FaultLog] = []
    failure = source = None
    lines: list[str] = []

    def close() -> None:
        if failure and source and any(line.strip() for line in lines):
            blocks.append(FaultLog(failure, source, tuple(line for line in lines if line.strip())))

    for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines():
        head = re.match(r"^# === (\S+) ===$", line)
        if head:
            close()
            failure, source, lines = head.group(1), None, []
        elif line.startswith("# SOURCE: "):
            source = line.removeprefix("# SOURCE: ").strip()
        elif not line.startswith("#"):
            lines.append(line)
    close()
    return blocks


def sample_captures(name: str) -> dict[str, str]:
    """The named captures of a sample file: a ``## name`` line opens one, ``#`` lines are comments."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = out.setdefault(line[3:].strip(), [])
        elif not line.startswith("#") and current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") + "\n" for k, v in out.items()}


def probe_section(label: str, body: str) -> str:
    """One section of a probe script's output (facts, discovery): its ``MARK label`` line, then ``body``."""
    from provision.ascend.facts import MARK

    return f"\n{MARK}{label}\n{body}\n"


def icmp_allowed() -> bool:
    """Whether this process may open an ICMP socket (the simulator's ping needs one)."""
    for kind in (socket.SOCK_RAW, socket.SOCK_DGRAM):
        try:
            socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP).close()
            return True
        except OSError:
            continue
    return False


METRICS = Path(__file__).parent / "fixtures" / "metrics"


def metric_families(name: str) -> dict[str, str]:
    """``tests/fixtures/metrics/<name>.txt`` (``TYPE name`` lines, from the real sources they cite): family
    name -> type."""
    out: dict[str, str] = {}
    for line in (METRICS / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            kind, family = line.split()
            out[family] = kind
    return out


def promtool() -> str:
    """The real promtool (Debian's ``prometheus`` package). Missing: fail, so CI never passes without the rule
    tests; ``PROVISION_ALLOW_SKIP=1`` skips them instead, but never where ``CI`` is set."""
    found = shutil.which("promtool")
    if found:
        return found
    reason = "promtool not found: apt-get install prometheus (Debian's package; see .ci/apt-packages.txt)"
    if os.environ.get("PROVISION_ALLOW_SKIP") == "1" and not os.environ.get("CI"):
        pytest.skip(reason)
    pytest.fail(reason, pytrace=False)


# Identifiers of a PromQL expression that are not metric names.
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile", "stddev", "stdvar", "rate", "irate",
    "increase", "delta", "idelta", "deriv", "histogram_quantile", "changes", "resets", "abs", "clamp_min",
    "clamp_max", "vector", "scalar", "time", "absent", "label_replace", "max_over_time", "min_over_time",
    "avg_over_time", "sum_over_time", "le", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside label matchers, ranges and strings that
    are not PromQL's own words or a grouping clause's labels."""
    bare = re.sub(r'"[^"]*"', "", expr)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", bare)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare))
    return {n for n in names if n.lower() not in PROMQL_WORDS and not re.fullmatch(r"\d+[smhdwy]?", n)}


def known_metrics() -> set[str]:
    """Every series name the exporter and the engine expose (a counter's _total, a histogram's series)."""
    names = {"up"}
    for source in ("npu-exporter", "vllm-0.32"):
        for family, kind in metric_families(source).items():
            if kind == "counter":
                names.add(family if family.endswith("_total") else f"{family}_total")
            elif kind == "histogram":
                names |= {f"{family}_bucket", f"{family}_sum", f"{family}_count"}
            else:
                names.add(family)
    return names


class Prometheus:
    """Debian's real Prometheus (beside :func:`promtool`) on a free loopback port for its web UI and API,
    with ``config`` and a temporary storage in ``folder``; stopped by its PID with :meth:`stop`."""

    def __init__(self, config: Path, folder: Path) -> None:
        self.config, self.folder = config, folder
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 30) -> Prometheus:
        with socket.socket() as sock:  # the kernel's pick: free now
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        argv = [
            str(Path(promtool()).with_name("prometheus")),
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        log = (self.folder / "prometheus.log").open("w")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)
        log.close()
        self.wait("Prometheus ready", lambda: self._get("/-/ready").startswith("Prometheus"), timeout)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, 15)
            self.proc.wait(timeout=30)

    def log(self) -> str:
        return (self.folder / "prometheus.log").read_text(errors="replace")[-3000:]

    def _get(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
            return str(response.read().decode())

    def api(self, path: str, **params: str) -> Any:
        """``data`` of ``/api/v1/<path>``."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return json.loads(self._get(f"/api/v1/{path}{query}"))["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A matrix: each series' ``metric`` and its ``values`` (``[[unix time, "value"], ...]``)."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        result: list[dict[str, Any]] = self.api("query_range", **params)["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return found

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The alerts named ``name`` (pending or firing)."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [a for a in found if a["labels"].get("alertname") == name]

    def wait(
        self,
        what: str,
        probe: Callable[[], object],
        timeout: float = 30,
        every: float = 0.5,
        detail: Callable[[], str] | None = None,
    ) -> float:
        """Seconds until ``probe()`` is true; fails with Prometheus' log when it exits or time runs out, and
        with ``detail()`` (what the last probe lacked) when given."""
        started = time.monotonic()
        last: Exception | None = None
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                pytest.fail(f"prometheus exited {self.proc.returncode}:\n{self.log()}", pytrace=False)
            try:
                if probe():
                    return time.monotonic() - started
            except (OSError, ValueError, KeyError) as exc:
                last = exc
            if time.monotonic() - started > timeout:
                lacking = f"\n{detail()}" if detail is not None else ""
                pytest.fail(
                    f"{what}: not within {timeout:.0f} s ({last!r}){lacking}\n{self.log()}", pytrace=False
                )
            time.sleep(every)


def gpg_agents(home: Path, within: float = 0.0) -> list[int]:
    """PIDs of the gpg-agent processes serving the GnuPG home ``home`` (their command lines name it); with
    ``within``, those still there after waiting up to that many seconds for none to be left (``gpgconf
    --kill gpg-agent`` asks the agent to stop and returns before it has exited)."""
    deadline = time.monotonic() + within
    while (pids := _gpg_agents(home)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return pids


def _gpg_agents(home: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == "gpg-agent" and str(home).encode() in argv:
            pids.append(int(entry.name))
    return pids


def gnupg_home(request: pytest.FixtureRequest, folder: Path) -> Path:
    """A private GnuPG home in ``folder`` whose gpg-agent (started by an import or a signature) is stopped
    when the test ends: it would outlive the session."""
    home = folder / "gnupg"
    home.mkdir(mode=0o700)

    def stop() -> None:
        if shutil.which("gpgconf"):
            subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)

    request.addfinalizer(stop)
    return home

"""A read-only playbook of one play run in this process: Ansible's own executor, a thread per host.

The records path asks every node one question (``playbooks/converged.yml``). Through ansible-playbook that
costs a second Python start (imports, the inventory parsed again, plugins found again) and a worker process
forked per host and task, on top of the one SSH round trip per node the question needs. Here the same tasks
run through the same code a worker runs (:class:`ansible.executor.task_executor.TaskExecutor`: the host's
variables, its connection plugin and settings, become, the action plugin), from a thread pool of ``forks``
threads in provision's own process, over the inventory provision already read. The events it reports are
shaped as ansible-runner's, so everything downstream (the live display, :class:`RunResult`, the records
engine) reads them as it reads a playbook run's, and they are kept in the run directory as ansible-runner
keeps them (``artifacts/<ident>/job_events``).

Only what such a run can do exactly as ansible-playbook would is run here; anything else goes to
:func:`provision.runner.run.run_playbook` (:func:`refusal` says why): a play with roles, handlers, loops,
delegation, blocks or facts to gather; command-line Ansible options (passwords, user, connection, become,
private key); verbosity; an Ansible configuration in this process other than the run's (Ansible reads its
config file once per process: :func:`provision.ansible_config.use_run_config` makes it the run's).
"""

from __future__ import annotations

import inspect
import json
import os
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provision import paths
from provision.ansible_config import start_collection_loader
from provision.inventory.load import Inventory
from provision.runner.events import Observer
from provision.runner.options import AnsibleOptions
from provision.runner.run import (
    RunResult,
    Sources,
    _Collector,
    ansible_env,
    new_run_dir,
    run_playbook,
)

# Ansible's connection plugins this runner reaches nodes with: those a worker uses unchanged in a thread
# (each task's connection is its own; Mitogen's keep state per process and run through ansible-playbook).
CONNECTIONS = frozenset({"ssh", "ansible.builtin.ssh", "local", "ansible.builtin.local"})
DEFAULT_FORKS = 5
# The settings a run's environment gives Ansible besides its config file: set in this process for the run.
_NOT_ANSIBLE = ("PATH", "PYTHONUNBUFFERED", "PYTHONWARNINGS")


def run_in_process(
    playbook: str,
    inventory_path: Sources,
    *,
    loaded: Inventory | None,
    verb: str,
    limit: str | None = None,
    extra_vars: Sequence[str] = (),
    forks: int | None = None,
    verbosity: int = 0,
    observer: Observer | None = None,
    env: Mapping[str, str] | None = None,
    options: AnsibleOptions | None = None,
) -> RunResult:
    """Run ``playbooks/<playbook>`` on ``loaded`` (the inventory read from ``inventory_path``) in this process
    when :func:`refusal` allows, else through :func:`~provision.runner.run.run_playbook` with the same
    arguments; one :class:`RunResult` either way (``env`` is for the ansible-playbook run only).

    An error of this runner's own (not a task's: those are results) sends the play to ansible-playbook
    whole, its traceback kept in the abandoned run's directory (``in-process-error.txt``): the plays it is
    given (the records' check and write) may run twice."""
    why = refusal(loaded, extra_vars=extra_vars, verbosity=verbosity, options=options)
    if why is None and loaded is not None:
        run = None
        try:
            with _run_environment():
                play = _simple_play(playbook, loaded)
                if isinstance(play, _Play):
                    run = _Run(play, loaded, verb, observer)
                    return run.run(limit, extra_vars, forks)
        except Exception:  # Ansible's internals changed under it: ansible-playbook runs the play again
            if run is not None:
                (run.run_dir / "in-process-error.txt").write_text(traceback.format_exc())
    return run_playbook(
        playbook, inventory_path, verb=verb, limit=limit, extra_vars=extra_vars, forks=forks,
        verbosity=verbosity, observer=observer, env=env, options=options,
    )  # fmt: skip


def refusal(
    inventory: Inventory | None,
    *,
    extra_vars: Sequence[str] = (),
    verbosity: int = 0,
    options: AnsibleOptions | None = None,
) -> str | None:
    """Why this run must go through ansible-playbook (None: it may run in this process)."""
    if inventory is None or inventory.manager is None or inventory.loader is None:
        return "the inventory was not read in this process"
    if verbosity:
        return "-v: ansible-playbook's own output"
    if options is not None and options != AnsibleOptions(vault=options.vault):
        return "command-line Ansible options"
    if any(not str(each).startswith("@") for each in extra_vars):
        return "extra variables other than @file"
    from ansible import constants
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    default = "ssh" if constants.DEFAULT_TRANSPORT == "smart" else str(constants.DEFAULT_TRANSPORT)
    transports = {str(v.get("ansible_connection") or default) for v in inventory.hosts.values()}
    if transports - CONNECTIONS:
        return f"connection {', '.join(sorted(transports - CONNECTIONS))}"
    expected = ansible_env().get("ANSIBLE_CONFIG")
    chosen = constants.config._config_file
    if not chosen or not expected or Path(chosen).resolve() != Path(expected).resolve():
        return f"Ansible in this process read {chosen or 'no config file'}, the run reads {expected}"
    if constants.TASK_TIMEOUT:
        return "task_timeout is set (Ansible times tasks out with a signal, in its main thread)"
    if not _executor_known():
        from ansible.release import __version__

        return f"ansible-core {__version__}: a task executor this runner does not drive (it drives 2.19's)"
    finder = AnsibleCollectionConfig.collection_finder
    if finder is not None and str(paths.collections_path()) not in map(str, finder._n_configured_paths):
        return "Ansible's collection loader in this process does not know provision's collection"
    return None


def _executor_known() -> bool:
    """Whether Ansible's TaskExecutor is the one this runner drives: ansible-core 2.19's, given the host,
    the task and its variables (2.21 moved both into a task context; its runs go through ansible-playbook)."""
    from ansible.executor.task_executor import TaskExecutor

    return list(inspect.signature(TaskExecutor.__init__).parameters)[1:4] == ["host", "task", "job_vars"]


@contextmanager
def _run_environment() -> Iterator[None]:
    """The environment an ansible-playbook run of provision's gets (its ``ANSIBLE_*`` settings), in this
    process for the run's length: Ansible reads those settings when a plugin asks for them."""
    wanted = {k: v for k, v in ansible_env().items() if k not in _NOT_ANSIBLE}
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True, slots=True)
class _Play:
    name: str
    play: Any
    """Ansible's Play."""
    tasks: list[Any]
    """Its tasks, in order (Ansible's Task objects)."""
    variables: Any
    """The VariableManager it was loaded with."""


def _simple_play(playbook: str, inventory: Inventory) -> _Play | str:
    """The one play of ``playbook`` when this runner runs it as ansible-playbook would, else why not."""
    from ansible import context
    from ansible.errors import AnsibleError
    from ansible.playbook import Playbook
    from ansible.playbook.task import Task
    from ansible.vars.manager import VariableManager

    path = str(paths.playbook(playbook))
    if not context.CLIARGS:
        # ansible-playbook's defaults for what its command line says (connection type, remote user,
        # timeouts, become): tasks read them through Ansible's global CLI arguments.
        from ansible.cli.playbook import PlaybookCLI

        PlaybookCLI(["ansible-playbook", path]).parse()
    start_collection_loader()
    variables = VariableManager(loader=inventory.loader, inventory=inventory.manager)
    try:
        plays = Playbook.load(path, variable_manager=variables, loader=inventory.loader).get_plays()
    except AnsibleError as exc:  # ansible-playbook says it in its own words
        return f"cannot load {playbook}: {str(exc).splitlines()[0]}"
    if len(plays) != 1:
        return f"{len(plays)} plays"
    play = plays[0]
    if play.roles or play.handlers or play.pre_tasks or play.post_tasks:
        return "roles, handlers, pre_tasks or post_tasks"
    if "{{" in str(play.hosts):
        return "a templated hosts pattern"
    if play.gather_facts not in (False, "no", "false"):
        return "gather_facts"
    tasks = []
    for block in play.tasks:
        if block.rescue or block.always or block.when:
            return "a block with rescue, always or when"
        for task in block.block:
            if not isinstance(task, Task) or task.action in ("include_tasks", "import_tasks", "meta"):
                return "nested blocks, includes or meta tasks"
            if task.loop is not None or task.loop_with or task.delegate_to or task.run_once or task.notify:
                return f"task {task.get_name()}: a loop, delegation, run_once or notify"
            if task.async_val or task.timeout or task.until:
                return f"task {task.get_name()}: async, timeout or until"
            tasks.append(task)
    return _Play(playbook, play, tasks, variables)


class _NoQueue:
    """What TaskExecutor sends its callbacks through in a worker (loop items, async polls): none of them
    happen in the plays this runner takes."""

    def send_callback(self, *args: Any, **kwargs: Any) -> None:
        return None

    def send_prompt(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a task asked for input while running in provision's process")


_STATS = ("ok", "changed", "failures", "dark", "skipped", "ignored")


class _Run:
    """One run of a :class:`_Play`: task by task (as Ansible's linear strategy), each on every host still
    in the play at once; a host that fails or is unreachable runs no further task."""

    def __init__(self, play: _Play, inventory: Inventory, verb: str, observer: Observer | None) -> None:
        self.play, self.inventory = play, inventory
        self.collector = _Collector(observer)
        self.run_dir = new_run_dir(verb)
        self.artifacts = self.run_dir / "artifacts" / str(uuid.uuid4())
        (self.artifacts / "job_events").mkdir(parents=True)
        self.counter = 0
        self.warm = False
        self.stats: dict[str, dict[str, int]] = {key: {} for key in _STATS}

    def run(self, limit: str | None, extra_vars: Sequence[str], forks: int | None) -> RunResult:
        from ansible import constants

        started = time.monotonic()
        extra: dict[str, Any] = {}
        for each in extra_vars:
            extra.update(self.inventory.loader.load_from_file(str(each)[1:]) or {})
        manager, play = self.inventory.manager, self.play.play
        manager.subset(limit)
        try:
            hosts = list(manager.get_hosts(play.hosts))
        finally:
            manager.subset(None)
        names = [h.name for h in hosts]
        self._emit("playbook_on_start")
        self._emit("playbook_on_play_start", name=play.get_name(), play=play.get_name(), pattern=play.hosts)
        alive = list(hosts)
        threads = max(1, min(forks or int(constants.DEFAULT_FORKS or DEFAULT_FORKS), len(hosts) or 1))
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="provision-task") as pool:
            for task in self.play.tasks:
                if not alive:
                    break
                self._warm(task)
                about = {"task": task.get_name(), "task_action": task.action, "play": play.get_name()}
                self._emit("playbook_on_task_start", name=task.get_name(), **about)
                running = []
                for host in alive:
                    # As the strategy does, in its one thread: the host's variables for this task.
                    job_vars = self.play.variables.get_vars(
                        play=play, host=host, task=task, _hosts=names, _hosts_all=names
                    )
                    job_vars.update(extra)
                    job_vars["ansible_current_hosts"] = [h.name for h in alive]
                    job_vars["ansible_failed_hosts"] = sorted(set(names) - {h.name for h in alive})
                    self._emit("runner_on_start", host=host.name, **about)
                    running.append((host, pool.submit(self._execute, host, task, job_vars)))
                for host, future in running:
                    res = future.result()
                    kind, ignored = self._count(host.name, task, res)
                    if kind == "runner_on_unreachable" or (kind == "runner_on_failed" and not ignored):
                        alive.remove(host)
                    if task.register:
                        self.play.variables.set_nonpersistent_facts(host.name, {task.register: res})
                    self._emit(kind, host=host.name, res=res, ignore_errors=ignored, **about)
        self._emit("playbook_on_stats", processed=dict.fromkeys(names, 1), **self.stats)
        # ansible-playbook's exit codes: 2 when a host failed, else 4 when one was unreachable.
        rc = 2 if self.stats["failures"] else 4 if self.stats["dark"] else 0
        status = "successful" if rc == 0 else "failed"
        (self.artifacts / "rc").write_text(str(rc))
        (self.artifacts / "status").write_text(status)
        found = self.collector
        return RunResult(
            playbook=self.play.name, rc=rc, status=status, run_dir=self.run_dir,
            seconds=time.monotonic() - started, check=False, hosts=found.hosts, failures=found.failures,
            changes=found.changes, endpoints=[found.endpoints[k] for k in sorted(found.endpoints)],
            links=found.links,
        )  # fmt: skip

    def _count(self, host: str, task: Any, res: Mapping[str, Any]) -> tuple[str, bool]:
        """The result's event and whether its failure is ignored; counted as Ansible's recap does."""
        if res.get("unreachable"):
            kind = "runner_on_unreachable"
        elif res.get("failed") or res.get("failed_when_result"):
            kind = "runner_on_failed"
        elif res.get("skipped"):
            kind = "runner_on_skipped"
        else:
            kind = "runner_on_ok"
        ignored = kind == "runner_on_failed" and bool(task.ignore_errors)
        counted = {
            "ok": kind == "runner_on_ok" or ignored,
            "changed": kind == "runner_on_ok" and bool(res.get("changed")),
            "failures": kind == "runner_on_failed" and not ignored,
            "dark": kind == "runner_on_unreachable",
            "skipped": kind == "runner_on_skipped",
            "ignored": ignored,
        }
        for key, hit in counted.items():
            if hit:
                self.stats[key][host] = self.stats[key].get(host, 0) + 1
        return kind, ignored

    def _warm(self, task: Any) -> None:
        """Load, in this thread, the plugins a task loads the first time it runs (its action; the
        connection, shell and become plugins; Jinja's filters and tests): Ansible's plugin loaders fill
        their caches without locks, and a worker process never shares them."""
        from ansible.plugins.loader import (
            action_loader,
            become_loader,
            connection_loader,
            filter_loader,
            shell_loader,
            test_loader,
        )

        action_loader.get(task.action, class_only=True, collection_list=task.collections)
        if self.warm:
            return
        for name in CONNECTIONS:
            connection_loader.get(name, class_only=True)
        for loader in (shell_loader, become_loader, filter_loader, test_loader):
            for _ in loader.all(class_only=True):
                pass
        self.warm = True

    def _execute(self, host: Any, task: Any, job_vars: dict[str, Any]) -> dict[str, Any]:
        """What a worker process does for one host and task (``WorkerProcess._run``), in this thread: the
        task is the thread's own copy (TaskExecutor templates its fields in place)."""
        from ansible._internal import _task
        from ansible.executor.task_executor import TaskExecutor
        from ansible.playbook.play_context import PlayContext
        from ansible.plugins import loader as plugin_loader
        from ansible.vars.clean import module_response_deepcopy, strip_internal_keys

        own = task.copy()
        context = PlayContext(play=self.play.play)
        with _task.TaskContext(own):
            res = TaskExecutor(
                host, own, job_vars, context, self.inventory.loader, plugin_loader, _NoQueue(),
                self.play.variables,
            ).run()  # fmt: skip
        if res.get("_ansible_no_log"):
            hidden = "the output has been hidden due to the fact that 'no_log: true' was specified"
            return {
                "censored": hidden,
                "changed": bool(res.get("changed")),
                "failed": bool(res.get("failed")),
            }
        clean: dict[str, Any] = strip_internal_keys(module_response_deepcopy(res))
        clean.pop("invocation", None)
        return clean

    def _emit(self, kind: str, **data: Any) -> None:
        """One event, as ansible-runner writes it (``job_events/<counter>-<uuid>.json``) and hands it over:
        read back from JSON (plain lists, dicts and strings)."""
        self.counter += 1
        event = {
            "uuid": str(uuid.uuid4()),
            "counter": self.counter,
            "created": datetime.now(UTC).isoformat(),
            "event": kind,
            "event_data": {"playbook": f"{self.play.name}.yml", **data},
        }
        text = json.dumps(event, default=str)
        (self.artifacts / "job_events" / f"{self.counter}-{event['uuid']}.json").write_text(text)
        self.collector.handle(json.loads(text))

"""``provision apply`` of site.yml: skip the nodes that are still as their last converged apply left them.

1. ``playbooks/converged.yml`` (read-only, one command per node, then the health gate of its instances):
   each node's record (:mod:`provision.converge.record`) against the run's fingerprint and the node itself.
2. ``playbooks/site.yml`` on every node that is not verified, with the rest of its multi-node serving
   groups; not run at all when every node is verified. A node the check could not reach is reported
   unreachable and not contacted again.
3. ``playbooks/record.yml`` on the nodes site.yml converged: what they look like now, with every resource
   the run's tasks named, becomes their record.

:func:`fast_path_refusal` says when an apply cannot take this path (then site.yml runs everywhere, as
``--full`` asks): another playbook, tags, extra variables, check mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from provision.converge.record import Keys, fingerprint, keys_of_result, reads_outside, serving_closure
from provision.inventory.validate import VALIDATED_VARS, Resolved
from provision.runner.events import Observer, Outcome, TaskEvent, on_tasks
from provision.runner.inprocess import run_in_process
from provision.runner.options import AnsibleOptions
from provision.runner.run import RunResult, Sources, run_playbook
from provision.serving.health import serves_api

SITE = "site"
# converged.yml and record.yml run one command per node: Mitogen's bootstrap of each node costs more than it
# saves there (10 nodes: 5.4 s against 2.5 s with Ansible's linear strategy over pipelined SSH).
ONE_COMMAND = {"ANSIBLE_STRATEGY": "linear"}


def fast_path_refusal(
    playbook: str,
    *,
    tags: str | None,
    skip_tags: str | None,
    extra_vars: Sequence[str],
    check: bool,
    options: AnsibleOptions | None = None,
) -> str | None:
    """Why this apply must run site.yml on every node (None: it may skip verified nodes)."""
    if Path(playbook).stem != SITE:
        return f"playbook {playbook} (only site.yml applies keep records)"
    if tags or skip_tags:
        return "--tags/--skip-tags run part of site.yml"
    if options is not None and options.start_at_task:
        return "--start-at-task runs part of site.yml"
    if options is not None and options.lists:
        return "--list-hosts/--list-tasks run nothing"
    if extra_vars:
        return "--extra-vars are not in the inventory the records are fingerprinted from"
    if check:
        return "check mode"
    return None


class _Watch:
    """Keeps what the converge needs of the runs' task results: converged_state results per host and the
    resources every task named."""

    def __init__(self) -> None:
        self.states: dict[str, Mapping[str, Any]] = {}
        self.keys: dict[str, Keys] = {}

    def __call__(self, task: TaskEvent) -> None:
        if task.outcome is not Outcome.OK or not task.result:
            return
        if task.module == "converged_state":
            self.states[task.host] = task.result
        else:
            self.keys.setdefault(task.host, Keys()).update(keys_of_result(task.action, task.result))


def _vars_file(run_dir: Path, name: str, content: Mapping[str, Any]) -> str:
    path = run_dir / name
    path.write_text(json.dumps(content))
    path.chmod(0o600)
    return f"@{path}"


def converge(
    inventory: Resolved,
    inventory_path: Sources,
    *,
    scratch: Path,
    limit: str | None,
    forks: int | None,
    verbosity: int,
    observer: Observer | None,
    full: bool = False,
    diff: bool = False,
    options: AnsibleOptions | None = None,
    validated: bool = False,
    run: Callable[..., RunResult] = run_playbook,
    in_process: Callable[..., RunResult] = run_in_process,
) -> RunResult:
    """Verify (unless ``full``), run site.yml where needed, record; one :class:`RunResult` for all of it.

    ``inventory`` is the resolved view of ``inventory_path`` (:func:`provision.inventory.validate.resolve`):
    the fingerprints are taken of its hosts' variables, the serving groups are its own. converged.yml and
    record.yml (one command per node) go through ``in_process`` (:mod:`provision.runner.inprocess`: in this
    process where it can), site.yml through ``run``, told the inputs were checked when ``validated``
    (:attr:`provision.cli._playbook.PlaybookRun.validated`)."""
    hosts = inventory.hosts
    prints = {host: fingerprint(view.variables, playbook=SITE) for host, view in hosts.items()}
    outside = {host: name for host, view in hosts.items() if (name := reads_outside(view.variables))}
    fingerprints = _vars_file(scratch, "fingerprints.json", {"provision_fingerprints": prints})
    common: dict[str, Any] = {"forks": forks, "verbosity": verbosity, "options": options}
    watch = _Watch()
    watched = on_tasks(watch, then=observer)
    recording = partial(in_process, loaded=inventory.inventory)
    site_vars = [VALIDATED_VARS] if validated else []
    if full:
        site = run(SITE, inventory_path, verb="apply", limit=limit, diff=diff, extra_vars=site_vars,
                   observer=watched, **common)  # fmt: skip
        return _record(
            site, set(site.hosts), watch, inventory_path, fingerprints, scratch, common, observer, recording
        )

    verify = in_process("converged", inventory_path, loaded=inventory.inventory, verb="verify", limit=limit,
                        extra_vars=[fingerprints], observer=watched, env=ONE_COMMAND, **common)  # fmt: skip
    # A host the record check could not reach is not tried again by site.yml in the same run: one contact
    # per unreachable host, and the report says it was not reached, not that it was converged.
    lost = set(verify.unreachable)
    probed = sorted(set(verify.hosts) - lost)
    verified: dict[str, str] = {}
    drift: dict[str, list[str]] = {}
    for host in probed:
        state = watch.states.get(host)
        failed = [f for f in verify.failures if f.host == host]
        if host in outside:
            drift[host] = [f"variable {outside[host]} reads outside the inventory: always converged in full"]
        elif failed or state is None:
            drift[host] = [f"could not compare: {failed[0].message if failed else 'no answer'}"]
        elif not state.get("converged"):
            drift[host] = [str(r) for r in state.get("drift") or []] or ["not converged"]
        elif any(not e.ready for e in verify.endpoints if e.host == host and serves_api(e.role)):
            bad = [e for e in verify.endpoints if e.host == host and not e.ready and serves_api(e.role)]
            drift[host] = [f"endpoint {e.pool} {e.state}: {e.url}" for e in bad]
        else:
            verified[host] = f"as recorded at {state.get('written_at')}"
    groups = inventory.serving_groups
    rest = serving_closure(drift, groups) if groups is not None else set(drift) | set(verified)
    rest &= set(probed)
    for host in sorted(rest & set(verified)):
        drift[host] = ["a member of its serving group runs site.yml"]
        del verified[host]

    if not rest:
        verify.verified, verify.drift = verified, drift
        return verify

    watch.keys.clear()
    site = run(SITE, inventory_path, verb="apply", limit=",".join(sorted(rest)), diff=diff,
               extra_vars=site_vars, observer=watched, **common)  # fmt: skip
    site.verified, site.drift = verified, drift
    kept = set(verified) | lost
    site.hosts = {**{h: s for h, s in verify.hosts.items() if h in kept}, **site.hosts}
    site.failures = [f for f in verify.failures if f.host in lost] + site.failures
    site.endpoints = sorted(
        [e for e in verify.endpoints if e.host in verified] + site.endpoints, key=lambda e: (e.host, e.pool)
    )
    site.seconds += verify.seconds
    return _record(site, rest, watch, inventory_path, fingerprints, scratch, common, observer, recording)


def _record(
    site: RunResult,
    ran: set[str],
    watch: _Watch,
    inventory_path: Sources,
    fingerprints: str,
    scratch: Path,
    common: Mapping[str, Any],
    observer: Observer | None,
    run: Callable[..., RunResult],
) -> RunResult:
    """Write the record of every host site.yml converged (it ran there and did not fail)."""
    done = sorted(h for h, s in site.hosts.items() if h in ran and s.healthy)
    if done and site.rc in (0, 2, 4):  # 2: some host failed, 4: some unreachable; the others converged
        keys = {host: watch.keys.get(host, Keys()).to_json() for host in done}
        keys_file = _vars_file(scratch, "record-keys.json", {"provision_record_keys": keys})
        record = run("record", inventory_path, verb="record", limit=",".join(done),
                     extra_vars=[fingerprints, keys_file], observer=observer, env=ONE_COMMAND,
                     **common)  # fmt: skip
        site.recorded = sorted(h for h, s in record.hosts.items() if s.healthy and h in done)
        site.record_failures = [f"{f.host}: {f.message}" for f in record.failures]
        site.seconds += record.seconds
    return site

"""``provision doctor INVENTORY``: what is wrong on which node, and how to fix it.

One read-only round trip per node (the ``doctor_probe`` action through the runner seam; nothing is
installed or changed), parsed here with provision's parsers, then matched against the known failures of
``provision/data/failures.yml``. Per node: OK, or each failure found with its evidence line, cause, fix and
the public report that documents it, causes before the symptoms they cause (``symptoms`` in
``failures.yml``). ``--since DURATION`` bounds the logs read to that window. Exit 0 when every node is OK,
1 when a problem was found (or a node could not be probed), 2 on bad input (nothing touched).
``--bundle FILE`` writes a redacted tar.gz of everything collected, to attach to an issue.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer

from provision import paths
from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, connection_options
from provision.cli.console import Console
from provision.doctor.bundle import NodeBundle, write_bundle
from provision.doctor.catalog import Catalog, shipped
from provision.doctor.conditions import Expected, describe_age
from provision.doctor.diagnose import NodeReport, NpuAddresses, by_cause, diagnose, npu_addresses
from provision.doctor.probe import collect, parse_since
from provision.errors import InputError
from provision.inventory.load import Inventory, plain
from provision.inventory.schema import HOST_GROUP
from provision.inventory.validate import ResolvedHost, resolve
from provision.inventory.validate import check as check_inventory
from provision.runner.events import Outcome, TaskEvent, on_tasks
from provision.runner.run import run_module

_SECRET_NAME = re.compile(r"(api_key|password|passwd|token|secret)", re.IGNORECASE)
_BUNDLE_SUFFIXES = (".tar.gz", ".tgz")


@connection_options
def doctor(
    inventory: Path | None = common.InventoryArg,
    limit: str | None = typer.Option(
        None, "--limit", "-l", help="Only these hosts/groups (Ansible pattern)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable report on stdout."),
    bundle: Path | None = typer.Option(
        None,
        "--bundle",
        help="Also write everything collected, per node, secrets redacted, to this .tar.gz.",
        show_default=False,
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        metavar="DURATION",
        help="Only the logs of this last window: engine and docker journals, kernel lines of the last hours, "
        "plogs, NPU link records (e.g. 30m, 6h, 2d; default: the last journal lines, kernel lines of 6 h).",
        show_default=False,
    ),
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Diagnose the nodes: known failures (NPUs held, drivers off the lock, links down, engines down,
    docker, DKMS, disk...) with evidence and fix; exit 0 healthy, 1 a problem found, 2 bad input.
    Changes nothing on the nodes."""
    sources = _inputs.inventories(inventory, inventories)
    window = _since(since)
    if bundle is not None:
        _check_bundle(bundle)
    options = ansible.checked()
    loaded = check_inventory(sources, options.vault)  # bad input: exit 2, no host contacted
    limit = _inputs.limit(limit, loaded)
    catalog = shipped()
    _inputs.ask_passwords(options)
    targets = _targets(loaded, limit)
    resolved = resolve(loaded)
    answers: dict[str, dict[str, Any]] = {}

    def handle(task: TaskEvent) -> None:
        res = task.result
        if task.outcome is Outcome.OK and "probe" in res:
            answers[task.host] = {"probe": str(res["probe"]), "holders": str(res.get("holders") or "")}
        elif task.outcome is Outcome.FAILED:
            answers[task.host] = {"error": task.message or "the probe failed"}
        elif task.outcome is Outcome.UNREACHABLE:
            answers[task.host] = {"error": task.message or "unreachable", "unreachable": True}

    run = run_module(
        f"{paths.COLLECTION}.doctor_probe",
        sources,
        host_pattern=HOST_GROUP,
        limit=limit,
        verb="doctor",
        observer=on_tasks(handle),
        options=options,
        module_args=f"since_s={window}" if window is not None else "",
    )
    if not answers and run.rc != 0:
        raise InputError(
            f"could not probe {', '.join(map(str, sources))}: {run.stdout.strip()[-2000:] or run.status}"
        )
    reports, bundles = [], []
    # every node first: a log line of one node may name the NPU address of another one's port
    collected = {host: _collect(answers.get(host)) for host in targets}
    npus = npu_addresses({h: n for h, n in collected.items() if isinstance(n, dict)})
    for host in targets:
        report, node = _diagnose(
            host, answers.get(host), collected[host], _expected(resolved.hosts[host]), catalog, npus
        )
        reports.append(report)
        bundles.append(node)
    ordered = by_cause({r.host: r.findings for r in reports}, catalog)
    for report, node in zip(reports, bundles, strict=True):
        report.findings = ordered[report.host]
        if node.findings:
            node.findings = [asdict(f) for f in report.findings]
    manifest = write_bundle(bundle, bundles, secrets=_secrets(loaded, targets)) if bundle else None
    ok = all(r.ok for r in reports)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "ok": ok,
                    "nodes": [r.to_json() for r in reports],
                    "bundle": str(bundle) if bundle else None,
                },
                indent=2,
            )
        )
    else:
        _print(reports, bundle, manifest)
    if not ok:
        raise typer.Exit(1)


def _since(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise InputError(f"--since {value}: {exc}") from None


def _check_bundle(path: Path) -> None:
    if not path.name.endswith(_BUNDLE_SUFFIXES):
        raise InputError(f"--bundle {path}: name a .tar.gz (or .tgz) file")
    if path.is_dir():
        raise InputError(f"--bundle {path}: is a folder; name a .tar.gz file")
    if not path.parent.is_dir():
        raise InputError(f"--bundle {path}: no such folder {path.parent}")


def _targets(inventory: Inventory, limit: str | None) -> list[str]:
    hosts = inventory.group_hosts(HOST_GROUP)
    if limit:
        chosen = set(inventory.hosts_matching(limit))
        hosts = [h for h in hosts if h in chosen]
    if not hosts:
        raise InputError(f"{inventory.source}: no host of group {HOST_GROUP} to examine")
    return hosts


def _expected(host: ResolvedHost) -> Expected:
    """The versions the node should run: its overrides, else its stack of the lock."""
    variables = host.variables

    def given(name: str) -> str | None:
        value = variables.get(name)
        return str(value) if value not in (None, "") and "{{" not in str(value) else None

    stack = host.stack
    count = given("ascend_npu_count")
    return Expected(
        driver=given("ascend_driver_version") or stack.expected("driver"),
        firmware=given("ascend_driver_firmware_version") or stack.expected("firmware"),
        cann=given("cann_version") or stack.expected("cann"),
        nnal=given("cann_nnal_version") or stack.expected("nnal"),
        npu_count=int(count) if count and count.isdigit() else None,
    )


def _collect(answer: dict[str, Any] | None) -> dict[str, Any] | str | None:
    """The node's facts, the reason its probe cannot be read, or None (no probe output)."""
    if answer is None or "error" in answer:
        return None
    try:
        return collect(answer["probe"], answer["holders"])
    except ValueError as exc:
        return f"cannot read the node's probe: {exc}"


def _diagnose(
    host: str,
    answer: dict[str, Any] | None,
    collected: dict[str, Any] | str | None,
    expected: Expected,
    catalog: Catalog,
    npus: NpuAddresses,
) -> tuple[NodeReport, NodeBundle]:
    if answer is None:
        return NodeReport(host, reachable=False, error="no answer"), NodeBundle(host, error="no answer")
    if "error" in answer:
        reachable = not answer.get("unreachable")
        error = answer["error"]
        return NodeReport(host, reachable=reachable, error=error), NodeBundle(host, error=error)
    if not isinstance(collected, dict):
        error = collected or "no probe output"
        return NodeReport(host, error=error), NodeBundle(host, probe=answer["probe"], error=error)
    node = collected
    findings = diagnose(node, expected, catalog, npus)
    bundle = NodeBundle(
        host,
        probe=answer["probe"],
        holders=answer["holders"],
        facts=node,
        findings=[asdict(f) for f in findings],
    )
    links = node.get("links")
    return NodeReport(host, findings=findings, links=links if isinstance(links, dict) else None), bundle


def _secrets(inventory: Inventory, hosts: list[str]) -> list[str]:
    """The inventory's own secret values (API keys, passwords, tokens) of these hosts, to redact verbatim."""
    found: list[str] = []

    def walk(name: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(str(key), item)
        elif isinstance(value, list):
            for item in value:
                walk(name, item)
        elif isinstance(value, str) and _SECRET_NAME.search(name) and "{{" not in value:
            found.append(value)

    for host in hosts:
        for name, value in plain(inventory.hosts.get(host) or {}).items():
            walk(str(name), value)
    return found


def _print(reports: list[NodeReport], bundle: Path | None, manifest: dict[str, Any] | None) -> None:
    out = Console.for_stream(sys.stdout)
    width = max(len(r.host) for r in reports)
    for report in reports:
        if report.ok:
            out.line(f"{report.host:<{width}}  OK")
            _print_links(out, report)
            continue
        if report.error is not None:
            state = "UNREACHABLE" if not report.reachable else "NOT PROBED"
            out.line(
                f"{report.host:<{width}}  {state}: {report.error.splitlines()[0] if report.error else ''}"
            )
            continue
        out.line(f"{report.host:<{width}}  {len(report.findings)} problem(s)")
        for finding in report.findings:
            out.line(f"  [{finding.id}] {finding.title}")
            for line in finding.evidence:
                out.line(f"    evidence: {line}")
            if finding.caused_by:
                out.line(f"    caused by: {', '.join(finding.caused_by)} (fix that first)")
            out.line(f"    cause: {finding.cause}")
            out.line(f"    fix: {finding.fix}")
            out.line(f"    see: {', '.join(finding.sources)}")
        _print_links(out, report)
    healthy = sum(r.ok for r in reports)
    out.line(f"{healthy}/{len(reports)} node(s) OK")
    if bundle is not None and manifest is not None:
        size = bundle.stat().st_size
        out.line(f"bundle: {bundle} ({size} bytes, {len(manifest['files'])} files, secrets redacted)")


def _print_links(out: Console, report: NodeReport) -> None:
    """The figures of the last bandwidth check the node (a group's head) keeps, one line per NPU pair."""
    if not report.links:
        return
    age = report.links.get("age_s")
    when = f"{describe_age(age)} ago" if isinstance(age, int) else "at an unknown time"
    out.line(f"  NPU links, hccl_test all_reduce_test by the HCCN gate {when}:")
    for link in report.links.get("links") or []:
        measured = link.get("bandwidth_gbs")
        figure = f"{measured:.2f} GB/s" if isinstance(measured, (int, float)) else "not measured"
        floor = link.get("floor_gbs")
        against = f" (floor {floor:.2f} GB/s)" if isinstance(floor, (int, float)) else ""
        verdict = "ok" if link.get("ok") else f"REFUSED: {link.get('problem')}"
        out.line(
            f"    {link.get('host')} NPU {link.get('device')} <-> {link.get('peer')} NPU "
            f"{link.get('peer_device')}: {figure}{against} {verdict}"
        )


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)

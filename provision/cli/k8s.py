"""``provision k8s``: the inventory's served pools as Kubernetes objects.

``render`` writes them (YAML on stdout, one file per object with ``-o DIR``, or ``--json``) from the same
serving plan ``provision serve explain`` prints; ``diff`` says what ``apply`` would change on a cluster;
``apply`` server-side applies them (field manager ``provision``) and names the objects of pools the
inventory no longer holds, deleting them only with ``--prune``. Every input is checked before the first
request to the cluster.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
import yaml

from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, vault_options
from provision.cli.console import Console
from provision.errors import InputError
from provision.inventory.validate import check as check_inventory
from provision.k8s import autoscale
from provision.k8s.render import KUBE_VERSION, Options, render

k8s_app = typer.Typer(
    help="Kubernetes: the served pools as Deployments/LeaderWorkerSets, probes, autoscaling and monitors.",
    no_args_is_help=True,
)

_POOL = typer.Option(None, "--pool", help="Only this pool.")
_NAMESPACE = typer.Option("default", "--namespace", "-n", help="Namespace of every object.")
_KUBE_VERSION = typer.Option(
    f"{KUBE_VERSION[0]}.{KUBE_VERSION[1]}",
    "--kube-version",
    help="Kubernetes release the objects target (>= 1.20): before 1.23 the HPA is autoscaling/v2beta2, "
    "before 1.21 the PodDisruptionBudget policy/v1beta1.",
)
_AUTOSCALER = typer.Option(
    "hpa", "--autoscaler", help="hpa (External metrics via prometheus-adapter), keda, none."
)
_SCALE_ON = typer.Option(
    [],
    "--scale-on",
    help=f"Signal to scale on (repeatable): {', '.join(autoscale.SIGNALS)} [default: queue].",
)
_TARGET = typer.Option(
    [],
    "--target",
    help="SIGNAL=VALUE: the target of a signal (queue: waiting requests per replica, "
    f"default {autoscale.QUEUE.default_target:g}; npu: percent, default {autoscale.NPU.default_target:g}).",
)
_MAX_REPLICAS = typer.Option(
    None, "--max-replicas", min=1, help="Autoscaler's maximum [default: the hosts that serve the pool]."
)
_MONITORING = typer.Option(
    True, "--monitoring/--no-monitoring", help="ServiceMonitor, PodMonitor, PrometheusRule."
)
_API_KEY_SECRET = typer.Option(
    "provision-vllm-api-key", "--api-key-secret", help="Secret holding the API key (key 'api-key')."
)
_PROMETHEUS = typer.Option(
    autoscale.DEFAULT_PROMETHEUS, "--prometheus", help="Prometheus URL of KEDA's triggers."
)
_KUBECONFIG = typer.Option(
    None, "--kubeconfig", envvar="KUBECONFIG", help="kubeconfig [default: $KUBECONFIG, ~/.kube/config]."
)
_CONTEXT = typer.Option(None, "--context", help="kubeconfig context [default: its current-context].")
_JSON = typer.Option(False, "--json", help="Machine-readable output.")


def _version(text: str) -> tuple[int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.\d+)?", text.strip())
    if not match:
        raise InputError(f"--kube-version {text!r}: MAJOR.MINOR, e.g. 1.30")
    return int(match.group(1)), int(match.group(2))


def _targets(given: list[str]) -> dict[str, float]:
    out = {}
    for item in given:
        key, sep, value = item.partition("=")
        try:
            out[key] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InputError(f"--target {item!r}: SIGNAL=NUMBER, e.g. queue=5")
    return out


def _objects(
    inventory: Path | None,
    more: list[Path],
    ansible: AnsibleArgs,
    pool: str | None,
    namespace: str,
    kube_version: str,
    autoscaler: str,
    scale_on: list[str],
    target: list[str],
    max_replicas: int | None,
    monitoring: bool,
    api_key_secret: str,
    prometheus: str,
) -> list[dict[str, Any]]:
    options = Options(
        namespace=namespace,
        kube_version=_version(kube_version),
        autoscaler=autoscaler,
        signals=tuple(scale_on) or autoscale.DEFAULT_SIGNALS,
        targets=_targets(target),
        max_replicas=max_replicas,
        monitoring=monitoring,
        api_key_secret=api_key_secret,
        prometheus=prometheus,
    )
    checked = ansible.checked()
    loaded = check_inventory(_inputs.inventories(inventory, more), checked.vault)
    return render(loaded, options, pool)


def _file_name(obj: dict[str, Any]) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def _dump(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


@k8s_app.command("render")
@vault_options
def render_command(
    inventory: Path | None = common.InventoryArg,
    pool: str | None = _POOL,
    output: Path | None = typer.Option(None, "--output", "-o", help="Write one YAML file per object here."),
    namespace: str = _NAMESPACE,
    kube_version: str = _KUBE_VERSION,
    autoscaler: str = _AUTOSCALER,
    scale_on: list[str] = _SCALE_ON,
    target: list[str] = _TARGET,
    max_replicas: int | None = _MAX_REPLICAS,
    monitoring: bool = _MONITORING,
    api_key_secret: str = _API_KEY_SECRET,
    prometheus: str = _PROMETHEUS,
    as_json: bool = _JSON,
    more_inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Write the Kubernetes objects of every served pool, from the serving plan serve explain shows."""
    objects = _objects(
        inventory, more_inventories, ansible, pool, namespace, kube_version, autoscaler, scale_on, target,
        max_replicas, monitoring, api_key_secret, prometheus,
    )  # fmt: skip
    if output is not None:
        if output.exists() and not output.is_dir():
            raise InputError(f"{output}: not a directory")
        output.mkdir(parents=True, exist_ok=True)
        for obj in objects:
            path = output / _file_name(obj)
            path.write_text(json.dumps(obj, indent=2) + "\n" if as_json else _dump([obj]), encoding="utf-8")
        Console.for_stream(sys.stdout).line(f"{len(objects)} object(s) written to {output}")
        return
    if as_json:
        typer.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
        return
    typer.echo(_dump(objects), nl=False)


def _client(kubeconfig: Path | None, context: str | None) -> Any:
    from provision.k8s.client import Client, kubeconfig_path, load_config

    return Client(load_config(kubeconfig_path(kubeconfig), context))


def _report(outcome: Any, as_json: bool, verb: str) -> None:
    if as_json:
        typer.echo(json.dumps(outcome.as_dict(), indent=2))
        return
    out = Console.for_stream(sys.stdout)
    for item in outcome.objects:
        out.line(f"{item['object']}: {item['state']}")
        for path in item.get("diff") or []:
            out.line(f"  ~ {path}")
    for name in outcome.stale:
        out.line(
            f"{name}: {'pruned' if outcome.pruned else 'stale (no pool renders it; --prune deletes it)'}"
        )
    states = [item["state"] for item in outcome.objects]
    summary = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states)) or "nothing"
    out.line(f"{verb}: {summary}; {len(outcome.stale)} stale" + (" (pruned)" if outcome.pruned else ""))


@k8s_app.command("diff")
@vault_options
def diff_command(
    inventory: Path | None = common.InventoryArg,
    pool: str | None = _POOL,
    namespace: str = _NAMESPACE,
    kube_version: str = _KUBE_VERSION,
    autoscaler: str = _AUTOSCALER,
    scale_on: list[str] = _SCALE_ON,
    target: list[str] = _TARGET,
    max_replicas: int | None = _MAX_REPLICAS,
    monitoring: bool = _MONITORING,
    api_key_secret: str = _API_KEY_SECRET,
    prometheus: str = _PROMETHEUS,
    kubeconfig: Path | None = _KUBECONFIG,
    context: str | None = _CONTEXT,
    as_json: bool = _JSON,
    more_inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """What apply would change (a server-side dry-run apply of each object), and the stale objects."""
    from provision.k8s.sync import diff

    objects = _objects(
        inventory, more_inventories, ansible, pool, namespace, kube_version, autoscaler, scale_on, target,
        max_replicas, monitoring, api_key_secret, prometheus,
    )  # fmt: skip
    with _client(kubeconfig, context) as client:
        _report(diff(client, objects), as_json, "diff")


@k8s_app.command("apply")
@vault_options
def apply_command(
    inventory: Path | None = common.InventoryArg,
    pool: str | None = _POOL,
    namespace: str = _NAMESPACE,
    kube_version: str = _KUBE_VERSION,
    autoscaler: str = _AUTOSCALER,
    scale_on: list[str] = _SCALE_ON,
    target: list[str] = _TARGET,
    max_replicas: int | None = _MAX_REPLICAS,
    monitoring: bool = _MONITORING,
    api_key_secret: str = _API_KEY_SECRET,
    prometheus: str = _PROMETHEUS,
    kubeconfig: Path | None = _KUBECONFIG,
    context: str | None = _CONTEXT,
    prune: bool = typer.Option(False, "--prune", help="Delete the stale objects (pools no longer rendered)."),
    as_json: bool = _JSON,
    more_inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Server-side apply (field manager provision); a second apply changes nothing."""
    from provision.k8s.sync import apply

    if prune and pool is not None:
        raise InputError(
            "--prune with --pool: the other pools would read as stale; prune the whole inventory"
        )
    objects = _objects(
        inventory, more_inventories, ansible, pool, namespace, kube_version, autoscaler, scale_on, target,
        max_replicas, monitoring, api_key_secret, prometheus,
    )  # fmt: skip
    with _client(kubeconfig, context) as client:
        _report(apply(client, objects, prune=prune), as_json, "apply")


def register(app: typer.Typer) -> None:
    app.add_typer(k8s_app, name="k8s")

"""``provision sim``: rehearse before production on a simulated cluster.

Nodes are real Linux systems (systemd, sshd, python3) in containers on a private network, with simulated
Ascend NPUs; Ansible reaches them over SSH exactly as it reaches servers. Needs root and systemd-nspawn.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from provision.cli.console import Console
from provision.errors import InputError
from provision_sim import faults, flavours, snapshot
from provision_sim.cluster import DEFAULT_NAME, POWER_ACTIONS, Cluster

sim_app = typer.Typer(
    help="Rehearse before production: a simulated Ascend cluster of real Linux nodes reachable over SSH.",
    no_args_is_help=True,
)

NAME_OPTION = typer.Option(
    DEFAULT_NAME,
    "--name",
    envvar="PROVISION_SIM_NAME",
    help="Cluster name (several clusters can run at once).",
)


def _load(name: str) -> Cluster | None:
    return Cluster.load(name)


def _running_cluster(name: str) -> Cluster:
    cluster = Cluster.load(name)
    if cluster is None:
        raise InputError(f"no simulated cluster {name!r} (start one with `provision sim up`)")
    return cluster


@sim_app.command("up")
def up(
    nodes: int = typer.Option(3, "--nodes", help="How many nodes."),
    os_list: str | None = typer.Option(
        None,
        "--os",
        help=f"Node OS: {', '.join(flavours.FLAVOURS)}; a comma list is used in turn (mixed cluster). "
        f"Default {flavours.DEFAULT_FLAVOUR}.",
    ),
    npus: int | None = typer.Option(
        None,
        "--npus",
        help="Simulated NPU chips per node (an Atlas A3 has 16: 8 NPUs x 2, a 300I Duo card 2). Default 8.",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="NPU model: 910b1..910b4 (Atlas A2), 910_93 (Atlas A3), 310p3 (Atlas 300I Duo); "
        "a comma list is used in turn (mixed cluster). Default 910b3.",
    ),
    from_snapshot: str | None = typer.Option(
        None,
        "--from-snapshot",
        metavar="DIR[,DIR...]",
        help="Start every node already converged: as the node `provision sim snapshot` kept in DIR, with its "
        "own identity (host key, machine-id, address, NPU serials); a comma list is used in turn. OS, model, "
        "chip count and subnet are the snapshot's. The nodes have no record yet: the first `provision apply` "
        "runs site.yml (changing nothing) and records them.",
    ),
    bind_ro: list[str] = typer.Option(
        [],
        "--bind-ro",
        metavar="SRC[:DST]",
        help="Mount a host folder or file read-only into every node (repeatable), e.g. the cached engine: "
        "see `python -m provision_sim.serving.vllm_cpu paths`.",
    ),
    serve: bool = typer.Option(
        False,
        "--serve",
        help="Serve a real model: prepare the cached vLLM CPU engine (first time ≈ 4 min, then instant), "
        "mount it into the nodes and give each node a pool serving SmolLM2 on port 8000, so that "
        "`provision apply` ends with working endpoints.",
    ),
    name: str = NAME_OPTION,
) -> None:
    """Boot a simulated cluster and write its inventory."""
    out = Console.for_stream()
    err = Console.for_stream(sys.stderr)
    stamps = snapshot.parse_list(from_snapshot) if from_snapshot is not None else []
    if stamps:
        given = [flag for flag, value in (("--os", os_list), ("--model", model), ("--npus", npus)) if value]
        if given:
            raise InputError(
                f"--from-snapshot takes OS, model and chip count from the snapshot: drop {given[0]}"
            )
    binds = list(bind_ro)
    if serve:
        from provision_sim.serving import vllm_cpu as engine
        from provision_sim.serving.setup import engine_binds

        report = engine.prepare(progress=err.status)
        err.status(f"vLLM CPU engine: {report.summary()}")
        binds += [bind for bind in engine_binds() if bind not in binds]
    cluster = Cluster.up(
        name,
        nodes=nodes,
        os_list=os_list or flavours.DEFAULT_FLAVOUR,
        npus=8 if npus is None else npus,
        progress=err.status,
        binds=binds,
        model_list=model or "910b3",
        snapshots=stamps,
    )
    if serve:
        from provision_sim.serving.setup import serving_group_vars, write_api_key

        cluster.group_vars_path.parent.mkdir(parents=True, exist_ok=True)
        with cluster.group_vars_path.open("a", encoding="utf-8") as handle:
            handle.write(serving_group_vars(cluster_dir=cluster.dir))
        err.status(write_api_key(cluster.inventory_path))
    for node in cluster.nodes:
        out.line(f"{node.name:<8} {node.ip:<15} {node.flavour:<16} {node.model}")
    t = cluster.timings
    out.line(
        f"cluster {cluster.name!r} up in {t['total']:.1f} s (base {t['base']:.1f} s, "
        f"network {t['network']:.1f} s, start {t['start']:.1f} s, boot to sshd {t['boot']:.1f} s)"
    )
    out.line(f"inventory: {cluster.inventory_path}")
    if cluster.mirror_url:
        out.line(f"local mirror: {cluster.mirror_url} (variables in {cluster.group_vars_path})")


@sim_app.command("snapshot")
def take_snapshot(
    node: str = typer.Argument(..., help="A converged node, e.g. node1."),
    dest: Path = typer.Argument(..., help="Folder to create for the snapshot (must not exist)."),
    name: str = NAME_OPTION,
) -> None:
    """Keep a converged node for `sim up --from-snapshot`: it powers off cleanly, its files are copied to
    DEST (less its identity and its record), and it boots again."""
    cluster = _running_cluster(name)
    started = time.monotonic()
    snap = cluster.snapshot(node, dest.resolve())
    size = snapshot.size_bytes(snap.path) / 2**20
    Console.for_stream().line(
        f"{node} ({snap.flavour}, {snap.model}, {snap.npus} chips) kept in {snap.path}: {size:.0f} MiB, "
        f"in {time.monotonic() - started:.1f} s"
    )


@sim_app.command("mpi")
def mpi(name: str = NAME_OPTION) -> None:
    """Prepare the nodes for hccl_test as a site does: MPICH's mpirun on every node (simulated) and
    passwordless root SSH between them, so the HCCN gate measures the links between a group's NPUs."""
    cluster = _running_cluster(name)
    prepared = cluster.install_mpi()
    Console.for_stream().line(f"mpirun and root SSH between the nodes: {', '.join(prepared)}")


@sim_app.command("status")
def status(
    name: str = NAME_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show the nodes of a simulated cluster and whether they run."""
    cluster = _load(name)
    if cluster is None:
        Console.for_stream(sys.stderr).error(
            f"no simulated cluster {name!r} (start one with `provision sim up`)"
        )
        raise typer.Exit(1)
    states = cluster.status()
    if as_json:
        data = {
            "name": cluster.name,
            "dir": str(cluster.dir),
            "inventory": str(cluster.inventory_path),
            "controller_ip": cluster.controller_ip,
            "mirror_url": cluster.mirror_url,
            "nodes": [vars(state) for state in states],
        }
        typer.echo(json.dumps(data, indent=2))
        return
    out = Console.for_stream()
    out.line(f"cluster {cluster.name!r} ({cluster.dir}), inventory {cluster.inventory_path}")
    for state in states:
        out.line(f"{state.name:<8} {state.ip:<15} {state.flavour:<16} {state.state:<11} boots={state.boots}")


FAULT_HELP = (
    "Plant a fault on a node to rehearse it (`provision doctor` names it), or take it away with --clear. "
    "VALUE is JSON where the knob takes a map or a list (quote it for the shell). Without KNOB: list the "
    "node's faults. A stopped docker or vLLM unit needs no knob: "
    "`systemctl stop docker.socket docker.service` on the node.\n\nKnobs:\n\n"
    + "\n\n".join(faults.describe().splitlines())
)


@sim_app.command("fault", help=FAULT_HELP)
def fault(
    node: str = typer.Argument(..., help="The node, e.g. node2."),
    knobs: list[str] = typer.Argument(
        None, metavar="[KNOB[=VALUE]]...", help="e.g. npu_health='{\"3\": \"Critical\"}' link_down='[5]'"
    ),
    clear: bool = typer.Option(
        False, "--clear", help="Take the named faults away (all of them without KNOB)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the node's faults as JSON."),
    name: str = NAME_OPTION,
) -> None:
    words = list(knobs or [])
    if clear and any("=" in word for word in words):
        raise InputError("--clear takes knob names only (no =VALUE)")
    settings = {} if clear else faults.parse(words)  # checked before anything is touched
    target = _running_cluster(name).node(node)
    if clear:
        now = faults.clear(target, words)
    elif settings:
        now = faults.plant(target, settings)
    else:
        now = faults.current(target)
    if as_json:
        typer.echo(json.dumps(now, indent=2, sort_keys=True))
        return
    shown = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(now.items()))
    Console.for_stream().line(f"{node}: {shown or 'no faults'}")


@sim_app.command("power")
def power(
    node: str = typer.Argument(..., help="The node, e.g. node2."),
    action: str = typer.Argument(..., metavar="off|on|cycle"),
    hard: bool = typer.Option(
        False,
        "--hard",
        help="Power loss instead of a clean shutdown: the node's whole PID namespace ends at once "
        "(nothing of its systemd, sshd or containers survives).",
    ),
    name: str = NAME_OPTION,
) -> None:
    """Power a node off (clean shutdown, or --hard: a power loss), on (it boots again, its disk as it was),
    or cycle it."""
    if action not in POWER_ACTIONS:
        raise InputError(f"power {action!r}: use one of {', '.join(POWER_ACTIONS)}")
    cluster = _running_cluster(name)
    started = time.monotonic()
    cluster.power(node, action, hard=hard)
    target = cluster.node(node)
    how = "power loss" if hard else "clean shutdown"
    took = f"in {time.monotonic() - started:.1f} s"
    if action == "off":
        Console.for_stream().line(f"{node} stopped ({how}) {took}")
    else:
        Console.for_stream().line(f"{node} running (boot {target.boots}) {took}")


@sim_app.command("inventory")
def inventory(
    name: str = NAME_OPTION,
    path: bool = typer.Option(
        False, "--path", help="Print the path of the cluster's inventory.ini (its group_vars/ beside it)."
    ),
) -> None:
    """Print a YAML inventory of the running cluster, complete on its own (nodes, mirror URLs, pools):
    `provision sim inventory > lab.yml && provision apply lab.yml`."""
    cluster = _load(name)
    if cluster is None:
        Console.for_stream(sys.stderr).error(
            f"no simulated cluster {name!r} (start one with `provision sim up`)"
        )
        raise typer.Exit(1)
    if path:
        typer.echo(str(cluster.inventory_path))
        return
    typer.echo(cluster.complete_inventory(), nl=False)


@sim_app.command("down")
def down(name: str = NAME_OPTION) -> None:
    """Stop every node and remove the cluster's namespaces, mounts and files."""
    out = Console.for_stream()
    cluster = _load(name)
    if cluster is None:
        out.line(f"no simulated cluster {name!r}: nothing to do")
        return
    started = time.monotonic()
    warnings = cluster.down()
    for warning in warnings:
        Console.for_stream(sys.stderr).error(warning)
    out.line(f"cluster {name!r} down in {time.monotonic() - started:.1f} s")


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="sim")

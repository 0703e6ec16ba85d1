"""One serving plan: the role's filters and `provision serve explain` read the same plan
(provision/serving/plan.py), so for the same inventory each pool's command line and environment are equal
whichever of them computes it; and the plan is assembled in one place only."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.serve import register
from provision.inventory.groups import serving_groups_of
from provision.inventory.listen import management_address
from provision.inventory.roles import role_value
from provision.inventory.schema import HOST_GROUP
from provision.inventory.validate import check as check_inventory
from provision.paths import ansible_root
from provision.serving import plan
from provision.serving.multinode import group_dict, host_ranks
from tests.helpers import cli_app, load_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
FILTERS = load_module("vllm_serve_filters", ROOT / "plugins" / "filter" / "vllm_serve.py")
ROLE_VARS = yaml.safe_load((ansible_root() / "roles" / "vllm_serve" / "vars" / "main.yml").read_text())
INVENTORIES = [EXAMPLES / "inventory.ini", EXAMPLES / "deepseek-r1-2node" / "inventory.ini"]


def explain_json(inventory: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli_app(register), ["serve", "explain", str(inventory), "--json"])
    assert result.exit_code == 0, result.output
    records: list[dict[str, Any]] = json.loads(result.output)["instances"]
    return records


def role_instances(inventory: Path, host: str) -> list[dict[str, Any]]:
    """What check.yml and container_command.yml compute on ``host`` (Ansible's inputs spelled out: the
    role's defaults under the host's variables, the HCCN gate's ranks, a node whose docker has the Ascend
    runtime as its default, no HwHiAiUser group, the image not pulled yet)."""
    loaded = check_inventory(inventory)
    variables = loaded.hosts[host]

    def var(name: str) -> Any:
        return role_value(variables, name, "vllm_serve")

    mode = var("vllm_serve_mode")

    def command(key: str) -> list[str]:
        return [
            jinja2.Template(w).render(vllm_serve_venv=var("vllm_serve_venv")) for w in ROLE_VARS[key][mode]
        ]

    groups = [group_dict(g) for g in serving_groups_of(loaded.group_hosts(HOST_GROUP), loaded.hosts)]
    found: list[dict[str, Any]] = FILTERS.vllm_serve_instances(
        variables.get("npu_pools_list") or [],
        var("vllm_serve_profiles") or {},
        command("_vllm_serve_commands"),
        # the role's default, a template: the node's management address (provision_listen_address)
        bind_host=var("vllm_serve_bind_host")
        or management_address(str(variables.get("ansible_host") or host)),
        extra_env=var("vllm_serve_env") or {},
        ranks=host_ranks(groups, host, node_ip=str(variables.get("ansible_host") or host)),
        headless_command=command("_vllm_serve_headless_commands"),
        load_budget_s=var("vllm_serve_load_budget_s"),
        mode=mode,
    )
    if mode != "container":
        return found
    image = var("vllm_serve_image") or (
        f"{var('vllm_serve_image_repository')}:{FILTERS.vllm_serve_image_tag('', 'aarch64')}"
    )
    settings = {
        "image": image,
        "engine": var("vllm_serve_container_engine"),
        "shm_size": var("vllm_serve_container_shm_size"),
        "volumes": var("vllm_serve_container_volumes"),
        "extra_args": var("vllm_serve_container_args"),
        "devices": "runtime",
        "device_group": var("vllm_serve_container_device_group"),
        "command": FILTERS.vllm_serve_image_command(var("vllm_serve_image_command"), {"rc": 1}),
    }
    wrapped: list[dict[str, Any]] = FILTERS.vllm_serve_containerize(
        found, settings, path_stats=[], group={"ansible_facts": {"getent_group": {}}}
    )
    return wrapped


@pytest.mark.parametrize("inventory", INVENTORIES, ids=lambda p: p.parent.name)
def test_the_filter_and_explain_give_each_pool_the_same_argv_and_env(inventory: Path) -> None:
    records = explain_json(inventory)
    assert records, "the example serves pools"
    for host in sorted({r["host"] for r in records}):
        mine = [r for r in records if r["host"] == host]
        items = role_instances(inventory, host)
        assert [i["pool"] for i in items] == [r["pool"] for r in mine]
        for item, record in zip(items, mine, strict=True):
            assert item["argv"] == record["argv"], f"{host}/{item['pool']}"
            assert item["env"] == record["env"], f"{host}/{item['pool']}"
            assert item["args_text"].splitlines() == record["argv"], "the args file the unit runs"
            assert item["start"] == record["role"]
    roles = {r["role"] for r in records}
    assert roles <= {"single", "head", "worker"} and roles


def test_the_deepseek_example_plans_a_head_and_a_worker() -> None:
    loaded = check_inventory(EXAMPLES / "deepseek-r1-2node" / "inventory.ini")
    served = plan.serving_plan(loaded)
    starts = {(host.host, pool.pool): pool.start for host, pool in served.pools()}
    assert starts == {("atlas-a01", "r1"): "head", ("atlas-a02", "r1"): "worker"}
    [(_, worker)] = [(h, p) for h, p in served.pools() if p.start == "worker"]
    assert worker.multinode is not None and worker.multinode.head == "atlas-a01"
    assert worker.container is not None and worker.container.name == "vllm-r1"
    assert "--headless" in worker.args and worker.argv[-len(worker.args) :] == worker.args
    assert "serves no API" in worker.readiness
    assert worker.budget_s == 3600


# ---------------------------------------------------------------------------------------- one assembly

# The pieces of a pool's plan, each defined in its own module; only plan.py puts them together.
ASSEMBLY_CALLS = {"vllm_args", "vllm_env", "load_budget", "run_argv"}
DEFINED_IN = {
    "provision/serving/profiles.py",
    "provision/inventory/budget.py",
    "provision/serving/container.py",
    "provision/serving/plan.py",
}
PRODUCT = [ROOT / "provision", ROOT / "plugins", ROOT / "roles"]


def assembly_calls(path: Path) -> list[str]:
    """``name:line`` of every call of a plan piece in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ASSEMBLY_CALLS:
                found.append(f"{name}:{node.lineno}")
    return found


def test_the_serving_plan_is_assembled_in_one_place() -> None:
    sources = [p for folder in PRODUCT for p in sorted(folder.rglob("*.py"))]
    offenders = {
        str(path.relative_to(ROOT)): assembly_calls(path)
        for path in sources
        if str(path.relative_to(ROOT)) not in DEFINED_IN
    }
    assert {path: calls for path, calls in offenders.items() if calls} == {}
    assert assembly_calls(ROOT / "provision" / "serving" / "plan.py"), "the scan sees plan.py's assembly"


def test_the_assembly_scan_sees_a_second_assembly(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text(
        "from provision.serving import profiles\nfrom provision.serving.container import run_argv\n"
        "args = profiles.vllm_args(p, pool)\n"
        "argv = run_argv(item, settings)\n"
        "fine = profiles.served_name(p)\n"
    )
    assert assembly_calls(sample) == ["vllm_args:3", "run_argv:4"]


# ------------------------------------------------------------------- what the node says, read by the filters

POOL = {"name": "chat", "devices": [2, 3], "port": 8001, "profile": "tp2"}
TP2 = {"tp2": {"model": "/engine/models/m", "tensor_parallel_size": 2}}


def test_the_filter_reads_the_nodes_stat_and_getent_results() -> None:
    [item] = FILTERS.vllm_serve_instances(
        [POOL], TP2, [], pool_files=[{"item": POOL, "stat": {"exists": True, "checksum": "c0ffee"}}]
    )
    assert "pool file sha1 c0ffee" in item["env_text"]
    assert "container" not in item, "service mode until vllm_serve_containerize wraps it"
    paths = FILTERS.vllm_serve_container_paths([item])
    present = {"/dev/davinci2", "/dev/davinci3", "/usr/local/dcmi"}
    stats = [{"item": path, "stat": {"exists": path in present}} for path in paths]
    getent = {"ansible_facts": {"getent_group": {"HwHiAiUser": ["x", "1001", ""]}}}
    settings = {"image": "i:1", "devices": "device", "device_group": "HwHiAiUser", "command": []}
    [wrapped] = FILTERS.vllm_serve_containerize([item], settings, path_stats=stats, group=getent)
    argv = wrapped["argv"]
    assert argv[argv.index("--group-add") + 1] == "1001"
    mounts = [argv[i + 1] for i, word in enumerate(argv) if word == "-v"]
    assert "/usr/local/dcmi:/usr/local/dcmi:ro" in mounts, "an existing driver file is mounted"
    assert not any(m.startswith(("/etc/ascend_install.info", "/dev/")) for m in mounts), "absent or a device"
    [bare] = FILTERS.vllm_serve_containerize([item], settings, path_stats=[], group={"skipped": True})
    assert "--group-add" not in bare["argv"], "no such group on the node: no --group-add"


def test_the_readiness_endpoint_answers_for_the_pools_that_serve_an_api() -> None:
    items = [
        {"pool": "chat", "port": 8001, "start": "single"},
        {"pool": "r1", "port": 8000, "start": "head"},
        {"pool": "r2", "port": 8002, "start": "worker"},
    ]
    assert FILTERS.vllm_serve_ready_pools(items, "127.0.0.1") == {
        "chat": "http://127.0.0.1:8001/health",
        "r1": "http://127.0.0.1:8000/health",
    }

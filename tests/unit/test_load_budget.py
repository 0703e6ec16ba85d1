"""One load budget for every layer: each shipped profile's deadlines as the role writes them (the engine's
environment, the unit, ``docker run``, the gate), `provision serve explain` on the example inventories,
and the refusal of an inventory timeout shorter than the budget."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.serve import register
from provision.inventory import budget
from provision.inventory.profiles import required_npus, shipped_profiles
from provision.paths import ansible_root
from tests.helpers import API_KEY_VARS, cli_app, load_module, run_cli, validate

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
FILTERS = load_module("vllm_serve_filters", ROOT / "plugins" / "filter" / "vllm_serve.py")
SHIPPED = sorted(shipped_profiles())
DEFAULTS = yaml.safe_load((ansible_root() / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text())
# Deadlines CANN documents a ceiling for: a layer may stay below the budget only at that ceiling.
CEILINGS = {budget.HCCL_CONNECT: budget.HCCL_CONNECT_RANGE[1], budget.HCCL_EXEC: budget.HCCL_EXEC_AIV_MAX}


def node_instances(name: str, mode: str, index: int = 0) -> list[dict[str, Any]]:
    """The role's instances of a pool served with shipped profile ``name``, as check.yml computes them."""
    profile = shipped_profiles()[name]
    pool = {"name": "p", "devices": list(range(required_npus(profile))), "port": 8000, "profile": name}
    ranks = {}
    if profile.nodes > 1:
        ranks = {
            "p": {
                "index": index,
                "role": "head" if index == 0 else "worker",
                "head_address": "10.0.0.1",
                "node_ip": f"10.0.0.{index + 1}",
                "ifname": "eth0",
                "hosts": ["n1", "n2"],
            }
        }
    found = FILTERS.vllm_serve_instances(
        [pool],
        {},
        ["python", "-m", "x"],
        ranks=ranks,
        headless_command=["vllm", "serve"],
        load_budget_s=DEFAULTS["vllm_serve_load_budget_s"],
        mode=mode,
    )
    if mode == "container":
        found = FILTERS.vllm_serve_containerize(found, {"image": "i:1", "devices": "runtime"})
    return list(found)


def unit_file(item: dict[str, Any]) -> str:
    """The role's systemd unit for ``item``, rendered as the template task renders it."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = (ansible_root() / "roles" / "vllm_serve" / "templates" / "vllm.service.j2").read_text()
    variables = {key: value for key, value in DEFAULTS.items() if "{{" not in str(value)}
    variables["vllm_serve_pools_dir"] = "/etc/provision/pools"
    return env.from_string(text).render(item=item, ansible_managed="managed", **variables)


def deadlines(item: dict[str, Any]) -> dict[str, float]:
    """Every deadline of the load as the node gets it: the environment file, the unit, docker run."""
    found = {
        key: float(item["env"][key])
        for key in (budget.ENGINE_READY, budget.HCCL_CONNECT, budget.HCCL_EXEC)
        if key in item["env"]
    }
    start = re.search(r"^TimeoutStartSec=(\d+)$", unit_file(item), re.M)
    assert start, "the unit sets TimeoutStartSec"
    found[budget.UNIT_START] = float(start.group(1))
    period = [a for a in item["argv"] if a.startswith(budget.HEALTH_START + "=")]
    if item.get("container"):
        assert len(period) == 1, item["argv"]
        found[budget.HEALTH_START] = float(period[0].split("=", 1)[1].removesuffix("s"))
    gate = [t for t in item["timeouts"] if t["setting"] == budget.GATE]
    found[budget.GATE] = float(gate[0]["value"])
    return found


@pytest.mark.parametrize("mode", ["service", "container"])
@pytest.mark.parametrize("name", SHIPPED)
def test_no_layer_gives_up_before_the_budget(name: str, mode: str) -> None:
    profile = shipped_profiles()[name]
    want = float(profile.load_budget_s or DEFAULTS["vllm_serve_load_budget_s"])
    for index in range(profile.nodes):
        [item] = node_instances(name, mode, index)
        got = deadlines(item)
        expected = {budget.ENGINE_READY, budget.UNIT_START, budget.GATE}
        expected |= {budget.HEALTH_START} if mode == "container" else set()
        expected |= {budget.HCCL_CONNECT, budget.HCCL_EXEC} if profile.nodes > 1 else set()
        assert set(got) == expected, f"{name}: every layer is set"
        for setting, value in got.items():
            ceiling = CEILINGS.get(setting)
            if ceiling is not None and want > ceiling:
                assert value == ceiling, f"{name}: {setting} at CANN's documented ceiling"
            else:
                assert value >= want, f"{name} ({mode}, node {index}): {setting}={value} < budget {want}"


def test_the_deepseek_profile_sets_every_hccl_layer_from_its_budget() -> None:
    head, worker = (node_instances("deepseek-r1-w8a8-2node", "container", i)[0] for i in (0, 1))
    for item in (head, worker):
        assert item["env"][budget.ENGINE_READY] == "3600"
        assert item["env"][budget.HCCL_CONNECT] == "3600"
        # the profile runs HCCL_OP_EXPANSION_MODE=AIV, where CANN caps the exec timeout at 1091 s
        assert item["env"][budget.HCCL_EXEC] == "1091"
        assert "--health-start-period=3600s" in item["argv"]
        assert "TimeoutStartSec=3600" in unit_file(item)
        limits = {t["setting"]: t["limit"] for t in item["timeouts"]}
        assert (
            limits[budget.HCCL_EXEC]
            == "CANN caps HCCL_EXEC_TIMEOUT at 1091 s with HCCL_OP_EXPANSION_MODE=AIV"
        )


def test_budget_beyond_cann_ceilings_is_clamped_and_says_so() -> None:
    profile = shipped_profiles()["deepseek-r1-w8a8-2node"].model_copy(
        update={"load_budget_s": 9000, "env": {}}
    )
    layers = {t.setting: t for t in budget.load_budget(profile, "big").timeouts}
    assert layers[budget.HCCL_CONNECT].value == 7200
    assert layers[budget.HCCL_CONNECT].limit == "CANN documents HCCL_CONNECT_TIMEOUT up to 7200 s"
    assert layers[budget.HCCL_EXEC].value == 9000 and not layers[budget.HCCL_EXEC].limit  # not AIV here
    assert layers[budget.ENGINE_READY].value == 9000


def test_an_inventory_value_at_least_the_budget_wins() -> None:
    [item] = FILTERS.vllm_serve_instances(
        [{"name": "p", "devices": [0, 1, 2, 3, 4, 5, 6, 7], "port": 8000, "profile": "chat-32b-tp8"}],
        {},
        ["python"],
        extra_env={budget.ENGINE_READY: 5000},
        mode="service",
    )
    assert item["env"][budget.ENGINE_READY] == "5000"
    [ready] = [t for t in item["timeouts"] if t["setting"] == budget.ENGINE_READY]
    assert (ready["kind"], ready["source"]) == ("override", "vllm_serve_env")


def test_a_short_value_fails_the_filter_too() -> None:
    # the role's own check, for a plain ansible-playbook run that provision validate did not precede
    with pytest.raises(Exception, match="VLLM_ENGINE_READY_TIMEOUT_S=600 is shorter than the load budget"):
        FILTERS.vllm_serve_instances(
            [{"name": "p", "devices": list(range(8)), "port": 8000, "profile": "chat-32b-tp8"}],
            {},
            ["python"],
            extra_env={budget.ENGINE_READY: 600},
        )


def test_the_health_start_period_is_not_a_container_arg() -> None:
    with pytest.raises(Exception, match="--health-start-period=1s: set from the profile's load_budget_s"):
        FILTERS.vllm_serve_containerize(
            [{"pool": "p", "profile": "x", "devices": [0], "args": [], "argv": [], "budget_s": 60}],
            {"image": "i:1", "extra_args": ["--health-start-period=1s"]},
        )


# --------------------------------------------------------------------------------------------- refusal


SHORT = """\
npu_pools_list: [{name: r1, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, profile: ds}]
vllm_serve_env:
  VLLM_ENGINE_READY_TIMEOUT_S: 600
vllm_serve_profiles:
  ds:
    model: /m
    tensor_parallel_size: 8
    load_budget_s: 2400
"""


def test_a_timeout_shorter_than_the_budget_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = validate(tmp_path, SHORT, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    assert "no host was contacted" in err
    assert (
        "group_vars/npu_nodes.yml:3: group npu_nodes: vllm_serve_env.VLLM_ENGINE_READY_TIMEOUT_S = 600: "
        "pool r1, load budget 2400 s (load_budget_s of profile ds): VLLM_ENGINE_READY_TIMEOUT_S=600 is "
        "shorter than the load budget: vLLM would stop waiting for its engine cores while they still load "
        "(at least 2400 s)"
    ) in " ".join(err.split())


def test_a_short_hccl_timeout_in_a_profile_is_refused_where_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inventory.ini").write_text(
        "[npu_nodes]\nn1 ansible_host=10.0.0.1\nn2 ansible_host=10.0.0.2\n"
    )
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "n1.yml").write_text("vllm_serve_load_budget_s: 1800\n")
    (tmp_path / "host_vars" / "n2.yml").write_text("vllm_serve_load_budget_s: 1800\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(
        "npu_pools_list: [{name: ds, devices: [0, 1, 2, 3], port: 8000, profile: two}]\n"
        "vllm_serve_profiles:\n"
        "  two:\n"
        "    model: /m\n"
        "    nodes: 2\n"
        "    tensor_parallel_size: 4\n"
        "    data_parallel_size: 2\n"
        "    env: {HCCL_CONNECT_TIMEOUT: 600, HCCL_EXEC_TIMEOUT: 0}\n"
    )
    (tmp_path / "group_vars" / "all.yml").write_text(API_KEY_VARS)
    code = run_cli(["validate", str(tmp_path / "inventory.ini")], monkeypatch)
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2
    assert "1 problem(s)" in err, "HCCL_EXEC_TIMEOUT 0 (never) holds any budget"
    # a group variable is reported once, for the group (the hosts' own budget is named as the source)
    assert (
        "group_vars/npu_nodes.yml:8: group npu_nodes: vllm_serve_profiles.two.env.HCCL_CONNECT_TIMEOUT = "
        "600: pool ds, load budget 1800 s (vllm_serve_load_budget_s): HCCL_CONNECT_TIMEOUT=600 is shorter "
        "than the load budget: HCCL would stop waiting for the other nodes' ranks to connect while they "
        "still load (at least 1800 s). Leave it unset (provision derives it from the budget) or raise it"
    ) in err


# --------------------------------------------------------------------------------------------- explain


def explain(*args: str) -> Any:
    return CliRunner().invoke(cli_app(register), ["serve", "explain", *args])


DS = "load_budget_s of profile deepseek-r1-w8a8-2node"


def test_explain_shows_every_layer_of_the_deepseek_example() -> None:
    result = explain(str(EXAMPLES / "deepseek-r1-2node" / "inventory.ini"))
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("    VLLM_ENGINE_READY_TIMEOUT_S=3600\n") == 2, "in each node's environment"
    for line in (
        "atlas-a01/r1: profile deepseek-r1-w8a8-2node, container mode, vllm-r1.service, port 8000, head of "
        "serving group r1 (atlas-a01, atlas-a02)",
        "atlas-a02/r1: profile deepseek-r1-w8a8-2node, container mode, vllm-r1.service, port 8000, worker of "
        "serving group r1 (atlas-a01, atlas-a02)",
        f"    VLLM_ENGINE_READY_TIMEOUT_S=3600  (vllm; budget: {DS})",
        f"    HCCL_CONNECT_TIMEOUT=3600         (hccl; budget: {DS})",
        f"    HCCL_EXEC_TIMEOUT=1091            (hccl; budget: {DS}; "
        "CANN caps HCCL_EXEC_TIMEOUT at 1091 s with HCCL_OP_EXPANSION_MODE=AIV)",
        f"    TimeoutStartSec=3600              (systemd; budget: {DS})",
        f"    --health-start-period=3600        (docker; budget: {DS})",
        f"    budget_s=3600                     (gate; budget: {DS})",
        "    /data/models/DeepSeek-R1-W8A8:/data/models/DeepSeek-R1-W8A8:ro",
    ):
        assert line in out.splitlines(), line
    [head_command] = [line for line in out.splitlines() if line.startswith("    docker run")][:1]
    assert "--health-start-period=3600s" in head_command
    assert head_command.endswith("--data-parallel-address 192.0.2.11 --data-parallel-rpc-port 13389")


def test_explain_json_one_pool_and_the_default_budget() -> None:
    result = explain(str(EXAMPLES / "inventory.ini"), "atlas-a02/batch", "--json")
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.output)["instances"]
    assert (record["host"], record["pool"], record["mode"]) == ("atlas-a02", "batch", "container")
    assert record["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert record["devices"][0].startswith("ASCEND_VISIBLE_DEVICES=4,5,6,7")
    ready = next(t for t in record["timeouts"] if t["setting"] == "VLLM_ENGINE_READY_TIMEOUT_S")
    assert (ready["kind"], ready["source"]) == ("default", "vllm_serve_load_budget_s (the role's default)")
    assert "HCCL_CONNECT_TIMEOUT" not in record["env"], "one node: no HCCL layer"


def test_explain_names_a_host_or_pool_it_does_not_know() -> None:
    inventory = str(EXAMPLES / "inventory.ini")
    result = explain(inventory, "atlas-z99")
    assert str(result.exception) == f"{inventory}: no host atlas-z99 in group npu_nodes"
    result = explain(inventory, "atlas-a01/nope")
    assert str(result.exception) == f"{inventory}: host atlas-a01 serves no pool nope; served: chat, batch"


def test_explain_refuses_a_bad_inventory_before_any_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(SHORT)
    (tmp_path / "inventory.ini").write_text("[npu_nodes]\nnode1 ansible_host=192.0.2.11\n")
    code = run_cli(["serve", "explain", str(tmp_path / "inventory.ini")], monkeypatch)
    assert code == 2
    assert "VLLM_ENGINE_READY_TIMEOUT_S=600 is shorter than the load budget" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        (
            {"HCCL_OP_EXPANSION_MODE": "AIV", "HCCL_EXEC_TIMEOUT": 1091},
            None,
        ),  # AIV's ceiling holds any budget
        ({"HCCL_EXEC_TIMEOUT": 0}, None),  # never times out
        ({"HCCL_CONNECT_TIMEOUT": 4000}, None),
        (
            {"HCCL_OP_EXPANSION_MODE": "AIV", "HCCL_EXEC_TIMEOUT": 500},
            "HCCL_EXEC_TIMEOUT=500 is shorter than the load budget: HCCL would fail a collective whose peers "
            "on another node still load (at least 1091 s; CANN caps it at 1091 s with "
            "HCCL_OP_EXPANSION_MODE=AIV)",
        ),
        ({"HCCL_EXEC_TIMEOUT": 3000}, "HCCL_EXEC_TIMEOUT=3000 is shorter than the load budget"),
        ({"HCCL_CONNECT_TIMEOUT": 9000}, "HCCL_CONNECT_TIMEOUT must be within [120, 7200] s"),
        ({"VLLM_ENGINE_READY_TIMEOUT_S": "3600.5"}, "VLLM_ENGINE_READY_TIMEOUT_S must be a whole number"),
        ({"VLLM_ENGINE_READY_TIMEOUT_S": "1h"}, "VLLM_ENGINE_READY_TIMEOUT_S must be a number of seconds"),
    ],
)
def test_which_inventory_values_hold_the_budget(env: dict[str, Any], problem: str | None) -> None:
    profile = shipped_profiles()["deepseek-r1-w8a8-2node"].model_copy(update={"env": env})
    found = budget.short_overrides(profile, "ds", pool="r1")
    if problem is None:
        assert found == []
    else:
        [short] = found
        assert short.message.startswith(
            "pool r1, load budget 3600 s (load_budget_s of profile ds): " + problem
        )

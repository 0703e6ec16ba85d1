"""Serving profiles: shipped data, profile -> vLLM argv/env, the rules `provision validate` enforces, and the
pure parts of the vllm_serve role's plugins (filters, unit liveness, the launcher)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from provision import systemd
from provision.inventory.profiles import (
    ProfileError,
    all_profiles,
    check_fits,
    required_npus,
    shipped_profiles,
)
from provision.inventory.schema import NpuPool, ServingProfile
from provision.serving import plan, profiles
from provision.serving.profiles import NodeRank
from provision_sim.serving.setup import smollm2_profile
from tests.helpers import load_module, validate

pytestmark = pytest.mark.unit

SHIPPED = sorted(shipped_profiles())
SMOL = {"smollm2-cpu": smollm2_profile()}  # the rig's profile, as its inventory brings it


def pool_for(profile: ServingProfile, name: str = "p", port: int = 8000) -> NpuPool:
    return NpuPool(name=name, devices=list(range(required_npus(profile))), port=port, profile=name)


# --------------------------------------------------------------------------------------------- shipped


def test_the_seed_cases_are_shipped() -> None:
    assert {"chat-32b-tp8", "batching-32b-tp8", "deepseek-r1-w8a8-2node"} <= set(SHIPPED)
    # the rig's CPU profile comes with the simulated cluster's inventory, not with the product
    assert "smollm2-cpu" not in SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_is_complete(name: str) -> None:
    profile = shipped_profiles()[name]
    assert profile.description, "every shipped profile says what it is for"
    assert profile.load_budget_s, "every shipped profile sets its load budget"
    assert profile.model.startswith("/"), "weights come from a local path"
    pool = pool_for(profile)
    check_fits(profile, pool, name)
    rank = NodeRank(0, "192.0.2.11") if profile.nodes > 1 else None
    argv = profiles.vllm_args(profile, pool, rank=rank)
    assert argv[:2] == ["--model", profile.model]
    assert len(argv) == len(set(a for a in argv if a.startswith("--"))) + sum(
        1 for a in argv if not a.startswith("--")
    ), f"a flag appears twice: {argv}"


def test_chat_profile_argv() -> None:
    profile = shipped_profiles()["chat-32b-tp8"]
    pool = NpuPool(name="chat", devices=list(range(8)), port=8000, profile="chat-32b-tp8")
    assert profiles.vllm_args(profile, pool) == [
        "--model",
        "/data/models/DeepSeek-R1-Distill-Qwen-32B",
        "--served-model-name",
        "deepseek-r1-distill-qwen-32b",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "8",
        "--max-model-len",
        "32768",
        "--gpu-memory-utilization",
        "0.9",
    ]
    env = profiles.vllm_env(profile, pool)
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"


def test_batching_profile_uses_real_scheduler_flags() -> None:
    profile = shipped_profiles()["batching-32b-tp8"]
    argv = profiles.vllm_args(profile, pool_for(profile))
    assert argv[argv.index("--max-num-seqs") + 1] == "32"
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "2048"


def test_deepseek_two_nodes_head_and_worker() -> None:
    """FACTS.md §5: DP 4 x TP 4, EP, W8A8; node 0 is the head, node 1 headless from DP rank 2."""
    profile = shipped_profiles()["deepseek-r1-w8a8-2node"]
    pool = NpuPool(name="r1", devices=list(range(8)), port=8000, profile="deepseek-r1-w8a8-2node")
    head = profiles.vllm_args(profile, pool, rank=NodeRank(0, "192.0.2.11"))
    worker = profiles.vllm_args(profile, pool, rank=NodeRank(1, "192.0.2.11"))
    for argv in (head, worker):
        text = " ".join(argv)
        for expected in (
            "--tensor-parallel-size 4",
            "--data-parallel-size 4",
            "--data-parallel-size-local 2",
            "--enable-expert-parallel",
            "--quantization ascend",
            "--max-num-seqs 16",
            "--max-model-len 16384",
            "--max-num-batched-tokens 4096",
            "--gpu-memory-utilization 0.92",
            "--trust-remote-code",
            "--data-parallel-address 192.0.2.11",
            "--data-parallel-rpc-port 13389",
        ):
            assert expected in text
    assert "--headless" not in head
    assert worker[-3:] == ["--headless", "--data-parallel-start-rank", "2"]
    env = profiles.vllm_env(profile, pool, node_ip="192.0.2.12", ifname="enp67s0f0")
    assert env["HCCL_IF_IP"] == "192.0.2.12"
    assert env["HCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp67s0f0"
    assert env["HCCL_OP_EXPANSION_MODE"] == "AIV"
    assert env["OMP_PROC_BIND"] == "false"
    with pytest.raises(ProfileError, match="rank"):
        profiles.vllm_args(profile, pool)


def test_ray_profile_has_no_dp_address() -> None:
    profile = ServingProfile(
        model="/m",
        nodes=2,
        tensor_parallel_size=8,
        pipeline_parallel_size=2,
        distributed_executor_backend="ray",
    )
    argv = profiles.vllm_args(profile, pool_for(profile))
    assert "--distributed-executor-backend" in argv and "ray" in argv
    assert "--data-parallel-address" not in argv


def test_additional_config_is_compact_json_and_extra_args_come_last() -> None:
    profile = ServingProfile(
        model="/m/x/",
        additional_config={"b": {"enabled": True}, "a": 1},
        extra_args=["--seed", "1024", "--no-enable-prefix-caching"],
    )
    argv = profiles.vllm_args(profile, pool_for(profile), host="10.0.0.5")
    assert argv[argv.index("--additional-config") + 1] == '{"a":1,"b":{"enabled":true}}'
    assert argv[-3:] == ["--seed", "1024", "--no-enable-prefix-caching"]
    assert argv[argv.index("--served-model-name") + 1] == "x"  # the folder's name by default
    assert argv[argv.index("--host") + 1] == "10.0.0.5"


def test_instances_for_the_served_pools_only() -> None:
    pools: list[dict[str, Any]] = [
        {"name": "smol", "devices": [0], "port": 8000, "profile": "smollm2-cpu"},
        {"name": "idle", "devices": [1], "port": 8001},
        {"name": "mine", "devices": [2, 3], "port": 8002, "profile": "tp2"},
    ]
    found = plan.pool_plans(
        pools,
        {**SMOL, "tp2": {"model": "/models/m", "tensor_parallel_size": 2}},
        extra_env={"LD_LIBRARY_PATH": "/x"},
    )
    assert [(i.pool, i.unit, i.port, i.served_model_name) for i in found] == [
        ("smol", "vllm-smol.service", 8000, "smollm2"),
        ("mine", "vllm-mine.service", 8002, "m"),
    ]
    # the load budget's layer (the default budget: tp2 sets none) joins the environment
    assert found[1].env == {
        "ASCEND_RT_VISIBLE_DEVICES": "2,3",
        "LD_LIBRARY_PATH": "/x",
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
    }
    assert found[0].load_budget_s == 600
    with pytest.raises(ProfileError, match="unknown serving profile 'nope'"):
        plan.pool_plans([{"name": "a", "devices": [0], "port": 8000, "profile": "nope"}])
    with pytest.raises(ProfileError, match="needs TP x DP x PP = 1"):
        plan.pool_plans([{"name": "a", "devices": [0, 1], "port": 8000, "profile": "smollm2-cpu"}], SMOL)


def test_user_profile_overrides_a_shipped_one() -> None:
    found = all_profiles({"chat-32b-tp8": {"model": "/elsewhere/qwen", "served_model_name": "s"}})
    assert found["chat-32b-tp8"].model == "/elsewhere/qwen"
    with pytest.raises(ProfileError, match=r"vllm_serve_profiles\.bad"):
        all_profiles({"bad": {"model": "/m", "tensor_parallel_size": 0}})


def test_args_and_env_files() -> None:
    assert (
        profiles.args_file(["--additional-config", '{"a": "b c"}']) == '--additional-config\n{"a": "b c"}\n'
    )
    with pytest.raises(ProfileError, match="line break"):
        profiles.args_file(["a\nb"])
    assert profiles.env_file({"B": 'say "hi" $HOME `x` \\', "A": "1"}) == (
        'A="1"\nB="say \\"hi\\" \\$HOME \\`x\\` \\\\"\n'
    )
    assert profiles.env_file({}) == ""


# --------------------------------------------------------------------------------------------- schema rules

BAD_PROFILES: list[tuple[str, dict[str, Any], str]] = [
    ("port-in-extra-args", {"extra_args": ["--port", "9000"]}, "--port is set by the pool's port"),
    ("api-key-in-extra-args", {"extra_args": ["--api-key=secret"]}, "vllm_serve_api_key"),
    (
        "tp-in-extra-args",
        {"extra_args": ["-tp", "2"]},
        "conflicts with the profile field tensor_parallel_size",
    ),
    ("underscore-flag", {"extra_args": ["--max_num_seqs=4"]}, "profile field max_num_seqs"),
    ("negated-flag", {"extra_args": ["--no-enforce-eager"]}, "profile field enforce_eager"),
    ("newline-arg", {"extra_args": ["a\nb"]}, "line break"),
    ("devices-in-env", {"env": {"ASCEND_RT_VISIBLE_DEVICES": "0"}}, "the pool's devices"),
    ("key-in-env", {"env": {"VLLM_API_KEY": "x"}}, "ansible-vault"),
    ("weights-without-flag", {"weights_quantization": "w8a8"}, "quantization: ascend"),
    ("batch-below-seqs", {"max_num_seqs": 64, "max_num_batched_tokens": 32}, ">= max_num_seqs (64)"),
    ("dp-not-divisible", {"nodes": 2, "data_parallel_size": 3, "tensor_parallel_size": 4}, "divisible"),
    ("dp-local-wrong", {"nodes": 2, "data_parallel_size": 4, "data_parallel_size_local": 1}, "must equal"),
    ("unknown-field", {"max_num_batches": 32}, "Extra inputs"),
    ("bad-dtype", {"dtype": "fp8"}, "bfloat16"),
]


@pytest.mark.parametrize(
    ("fields", "message"), [(f, m) for _, f, m in BAD_PROFILES], ids=[c[0] for c in BAD_PROFILES]
)
def test_schema_rejects(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        ServingProfile.model_validate({"model": "/m", **fields})
    assert message in str(info.value)


def test_schema_accepts_harmless_extra_args() -> None:
    profile = ServingProfile(model="/m", extra_args=["--seed", "1", "--enable-chunked-prefill", "-O0"])
    assert profile.extra_args[-1] == "-O0"


# --------------------------------------------------------------------------------------------- validate (CLI)


VALIDATE_CASES: list[tuple[str, str, list[str]]] = [
    (
        "extra-args-set-the-port",
        """\
        npu_pools_list: [{name: chat, devices: [0], port: 8000, profile: p}]
        vllm_serve_profiles:
          p: {model: /m, extra_args: ["--port", "8001"]}
        """,
        ["vllm_serve_profiles.p.extra_args", "--port is set by the pool's port"],
    ),
    (
        "weights-without-quantization",
        """\
        vllm_serve_profiles:
          w: {model: /m, weights_quantization: w8a8}
        """,
        ["vllm_serve_profiles.w.weights_quantization = 'w8a8'", "quantization: ascend"],
    ),
    (
        "two-node-profile-on-a-half-pool",
        """\
        npu_pools_list: [{name: r1, devices: [0, 1, 2, 3], port: 8000, profile: deepseek-r1-w8a8-2node}]
        """,
        ["npu_pools_list[0].profile = 'deepseek-r1-w8a8-2node'", "= 16 NPUs", "4 x 2 node(s) = 8"],
    ),
    (
        "multi-node-ray",
        """\
        npu_pools_list: [{name: r, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, profile: pp2}]
        vllm_serve_profiles:
          pp2: {model: /m, nodes: 2, tensor_parallel_size: 8, pipeline_parallel_size: 2,
                distributed_executor_backend: ray}
        """,
        ["npu_pools_list[0].profile = 'pp2'", "distributed_executor_backend: ray", "not in this version"],
    ),
    (
        "port-clash",
        """\
        npu_pools_list:
          - {name: a, devices: [0], port: 8000, profile: tp1}
          - {name: b, devices: [1], port: 8000, profile: tp1}
        vllm_serve_profiles:
          tp1: {model: /m}
        """,
        ["npu_pools_list[1].port = 8000", "already used by pool 'a'", "1 problem(s)"],
    ),
    (
        "container-mode-settings",
        """\
        vllm_serve_mode: docker
        vllm_serve_container_devices: all
        vllm_serve_image_url: ftp://mirror/vllm.tar
        """,
        [
            "vllm_serve_mode = 'docker': allowed: 'container' or 'service'",
            "vllm_serve_container_devices = 'all': allowed: 'auto', 'runtime' or 'device'",
            "must be an http://, https:// or file:// URL",
        ],
    ),
    (
        "unknown-role-variable",
        """\
        vllm_serve_load_budget: 60
        """,
        ["vllm_serve_load_budget", "did you mean 'vllm_serve_load_budget_s'?"],
    ),
]


@pytest.mark.parametrize(
    ("group_vars", "expected"), [(g, e) for _, g, e in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES]
)
def test_validate_rejects_before_any_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    group_vars: str,
    expected: list[str],
) -> None:
    assert validate(tmp_path, group_vars, monkeypatch) == 2
    output = capsys.readouterr()
    text = output.out + output.err
    for fragment in expected:
        assert fragment in text, text


def test_validate_accepts_the_shipped_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    group_vars = """\
    npu_pools_list:
      - {name: chat, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, profile: chat-32b-tp8}
    vllm_serve_profiles:
      tp1: {model: /m, extra_args: ["--seed", "7"]}
    vllm_serve_api_key: "{{ lookup('env', 'PROVISION_API_KEY') }}"
    """
    code = validate(tmp_path, group_vars, monkeypatch)
    output = capsys.readouterr()
    assert code == 0, output.out + output.err


# --------------------------------------------------------------------------------------------- role plugins

ROOT = Path(__file__).parents[2]


FILTERS = load_module("vllm_serve_filters", ROOT / "plugins/filter/vllm_serve.py")
ACTION = load_module("vllm_health_action", ROOT / "plugins/action/vllm_health.py")


def test_filter_instances_carry_the_files_bodies() -> None:
    pools = [{"name": "smol", "devices": [3], "port": 8001, "profile": "smollm2-cpu"}]
    [item] = FILTERS.vllm_serve_instances(
        pools, SMOL, ["/v/bin/python", "-m", "x"], pool_checksums={"smol": "ab"}
    )
    assert item["argv"][:4] == ["/v/bin/python", "-m", "x", "--model"]
    assert item["args_text"] == "\n".join(item["argv"]) + "\n"
    assert "pool file sha1 ab" in item["env_text"] and 'ASCEND_RT_VISIBLE_DEVICES="3"' in item["env_text"]
    assert item["unit"] == "vllm-smol.service" and item["load_budget_s"] == 600


def test_filter_pending_lists_installed_files_that_differ() -> None:
    import hashlib

    pools = [
        {"name": "a", "devices": [0], "port": 8000, "profile": "smollm2-cpu"},
        {"name": "b", "devices": [1], "port": 8001, "profile": "smollm2-cpu"},
    ]
    items = FILTERS.vllm_serve_instances(pools, SMOL, ["py"])

    def stat(item: dict[str, Any], kind: str, body: str | None) -> dict[str, Any]:
        if body is None:
            return {"item": [item, kind], "stat": {"exists": False}}
        return {
            "item": [item, kind],
            "stat": {"exists": True, "checksum": hashlib.sha1(body.encode()).hexdigest()},
        }

    a, b = items
    same = [stat(a, "args", a["args_text"]), stat(a, "env", a["env_text"])]
    assert FILTERS.vllm_serve_pending(items, [*same, stat(b, "args", None), stat(b, "env", None)]) == []
    changed = [stat(b, "args", "old\n"), stat(b, "env", b["env_text"])]
    assert FILTERS.vllm_serve_pending(items, [*same, *changed]) == ["b"]


def test_filter_reads_a_value_back_from_an_args_file() -> None:
    text = "py\n--port\n8001\n--served-model-name=s\n"
    assert FILTERS.vllm_serve_args_value(text, "--port") == "8001"
    assert FILTERS.vllm_serve_args_value(text, "--served-model-name") == "s"
    assert FILTERS.vllm_serve_args_value(text, "--host", "0.0.0.0") == "0.0.0.0"


@pytest.mark.parametrize(
    ("show", "described"),
    [
        (
            "ActiveState=active\nSubState=running\nMainPID=123\nNRestarts=0\nResult=success\n",
            "active/running, pid 123",
        ),
        (
            "ActiveState=activating\nSubState=auto-restart\nMainPID=0\nNRestarts=2\nResult=signal\n",
            "activating/auto-restart, 2 restart(s), result signal",
        ),
        ("ActiveState=inactive\nSubState=dead\nMainPID=0\nNRestarts=0\nResult=success\n", "inactive/dead"),
    ],
)
def test_unit_state_is_described(show: str, described: str) -> None:
    assert systemd.describe_unit(systemd.parse_show(show)) == described


def test_unit_watch_counts_a_restarted_engine_as_dead() -> None:
    answers = iter(
        [
            "ActiveState=active\nSubState=running\nMainPID=100\n",
            "ActiveState=active\nSubState=running\nMainPID=100\n",
            "ActiveState=active\nSubState=running\nMainPID=200\n",  # systemd restarted it: the engine died
        ]
    )
    asked: list[str] = []

    def run(command: str) -> dict[str, Any]:
        asked.append(command)
        return {"rc": 0, "stdout": next(answers)}

    watch = systemd.UnitWatch(run, "vllm-a.service", every_s=0.0, track_pid=True)
    assert [watch.alive(), watch.alive(), watch.alive()] == [True, True, False]
    assert asked[0].startswith("systemctl show -p ActiveState") and asked[0].endswith("vllm-a.service")

    failed: list[str] = []

    def run_failed(command: str) -> dict[str, Any]:
        failed.append(command)
        return {"rc": 0, "stdout": "ActiveState=failed\nSubState=failed\nMainPID=0\n"}

    throttled = systemd.UnitWatch(run_failed, "vllm-b.service", every_s=60.0, track_pid=False)
    assert [throttled.alive(), throttled.alive()] == [False, False]
    assert len(failed) == 1, "systemd is asked at most every every_s seconds"


def test_launcher_passes_arguments_verbatim(tmp_path: Path) -> None:
    import subprocess
    import sys

    argv = [
        sys.executable,
        "-c",
        "import json, sys; print(json.dumps(sys.argv[1:]))",
        '{"a": "b c"}',
        "x  y",
        "$HOME",
    ]
    (tmp_path / "args").write_text(profiles.args_file(argv))
    done = subprocess.run(
        [str(ROOT / "roles/vllm_serve/files/vllm-serve-launch"), str(tmp_path / "args")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '["{\\"a\\": \\"b c\\"}", "x  y", "$HOME"]'
    missing = subprocess.run(
        [str(ROOT / "roles/vllm_serve/files/vllm-serve-launch"), str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 66 and "cannot read" in missing.stderr


# --------------------------------------------------------------------------------------------- container mode

from provision.errors import InputError  # noqa: E402
from provision.serving import container  # noqa: E402

POOL_23 = {"name": "chat", "devices": [2, 3], "port": 8001, "profile": "tp2"}
TP2 = {"tp2": {"model": "/engine/models/m", "tensor_parallel_size": 2, "env": {"OMP_NUM_THREADS": 1}}}


def _instance() -> dict[str, Any]:
    [inst] = plan.pool_plans([POOL_23], TP2)
    return inst.as_dict()


def test_container_argv_with_the_ascend_runtime_names_only_the_pool_devices() -> None:
    inst = _instance()
    settings = container.ContainerSettings(
        image="vllm-ascend:t", volumes=["/engine", "/a:/b:ro"], group_add=["1000"]
    )
    argv = container.run_argv(inst, settings)
    assert argv[argv.index("--group-add") + 1] == "1000"
    assert argv[:6] == ["docker", "run", "--rm", "--name", "vllm-chat", "--pull=never"]
    assert "--net=host" in argv and "--shm-size=1g" in argv
    assert argv[argv.index("ASCEND_VISIBLE_DEVICES=2,3") - 1] == "-e"
    assert "--device" not in argv and not any("privileged" in arg for arg in argv)
    # the vLLM arguments follow the image, exactly as service mode runs them (one implementation)
    assert argv[argv.index("vllm-ascend:t") + 1 :] == inst["args"]
    env_names = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-e"]
    assert env_names == ["ASCEND_VISIBLE_DEVICES=2,3", *sorted(inst["env"]), "VLLM_API_KEY"]
    assert not any("=" in name for name in env_names[1:]), "values come from the unit's environment"
    volumes = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-v"]
    assert volumes == ["/engine:/engine:ro", "/a:/b:ro"], "the model under /engine is not mounted twice"


def test_container_argv_without_the_runtime_passes_devices_and_driver_files_read_only() -> None:
    inst = _instance()
    settings = container.ContainerSettings(image="i:1", devices="device", driver_mounts=["/usr/local/dcmi"])
    argv = container.run_argv(inst, settings, ["python3", "-m", "x"])
    devices = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--device"]
    assert devices == ["/dev/davinci2", "/dev/davinci3", *container.MANAGER_DEVICES]
    assert not any(arg.startswith("ASCEND_VISIBLE_DEVICES") for arg in argv)
    volumes = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-v"]
    assert volumes == ["/usr/local/dcmi:/usr/local/dcmi:ro", f"{inst['model']}:{inst['model']}:ro"]
    assert argv[argv.index("i:1") + 1 : argv.index("i:1") + 4] == ["python3", "-m", "x"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"extra_args": ["--privileged"]}, "never --privileged"),
        ({"extra_args": ["--device=/dev/davinci7"]}, "come from the pool"),
        ({"extra_args": ["--network", "bridge"]}, "--net=host"),
        ({"volumes": ["/data:/data:rw"]}, "read-only"),
        ({"volumes": ["relative"]}, "absolute"),
        ({"devices": "all"}, "runtime, device"),
        ({"image": "has space"}, "reference"),
    ],
)
def test_container_settings_refuse(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        container.ContainerSettings(**{"image": "i:1", **settings})


def test_filter_containerize_wraps_argv_and_args_file() -> None:
    items = FILTERS.vllm_serve_instances([POOL_23], TP2, [])
    [wrapped] = FILTERS.vllm_serve_containerize(items, {"image": "i:1", "devices": "runtime", "volumes": []})
    mounts = ["/usr/local/dcmi", "/etc/ascend_install.info", "/usr/local/Ascend/driver/lib64"]
    [one], [other] = (
        FILTERS.vllm_serve_containerize(items, {"image": "i:1", "devices": "device", "driver_mounts": order})
        for order in (mounts, mounts[::-1])
    )
    assert one["args_text"] == other["args_text"], "the order of the driver files changes no argument"
    assert wrapped["container"] == "vllm-chat"
    assert wrapped["argv"][:2] == ["docker", "run"]
    assert wrapped["argv"][-len(items[0]["args"]) :] == items[0]["args"]
    assert wrapped["args_text"] == "\n".join(wrapped["argv"]) + "\n"
    assert FILTERS.vllm_serve_containerize(items, {}) == items, "service mode: unchanged"
    # a headless worker's command stays between the image and the arguments
    worker = {**items[0], "argv": ["python3", "-m", "w", *items[0]["args"]]}
    [wrapped] = FILTERS.vllm_serve_containerize([worker], {"image": "i:1"})
    assert wrapped["argv"][wrapped["argv"].index("i:1") + 1 : wrapped["argv"].index("i:1") + 4] == [
        "python3",
        "-m",
        "w",
    ]
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="never --privileged"):
        FILTERS.vllm_serve_containerize(items, {"image": "i:1", "extra_args": ["--privileged"]})


# The official image (vllm-project/vllm-ascend's Dockerfile ends in CMD ["/bin/bash"]; its only entrypoint is
# the CANN base image's `bash -c 'source .../set_env.sh ... && exec "$@"' --`): the role supplies the command.
OFFICIAL_ENTRYPOINT = (
    '["/bin/bash","-c","source /usr/local/Ascend/ascend-toolkit/set_env.sh && exec \\"$@\\"","--"]'
)


@pytest.mark.parametrize(
    ("setting", "inspected", "command"),
    [
        ([], {"rc": 0, "stdout": '["/opt/provision/entrypoint.sh"]'}, []),  # ours serves the arguments
        ([], {"rc": 0, "stdout": OFFICIAL_ENTRYPOINT}, list(container.API_SERVER_COMMAND)),
        ([], {"rc": 0, "stdout": "null"}, list(container.API_SERVER_COMMAND)),  # no entrypoint at all
        ([], {"rc": 1, "stdout": "", "stderr": "No such image"}, []),  # not on the node yet: a dry run
        ([], {"skipped": True}, []),
        (["vllm", "serve"], {"rc": 0, "stdout": OFFICIAL_ENTRYPOINT}, ["vllm", "serve"]),
    ],
)
def test_filter_image_command_follows_the_images_entrypoint(
    setting: Any, inspected: dict[str, Any], command: list[str]
) -> None:
    assert FILTERS.vllm_serve_image_command(setting, inspected) == command


def test_the_official_image_gets_the_whole_command_before_the_arguments() -> None:
    items = FILTERS.vllm_serve_instances([POOL_23], TP2, [])
    official = FILTERS.vllm_serve_image_command([], {"rc": 0, "stdout": OFFICIAL_ENTRYPOINT})
    image = "quay.io/ascend/vllm-ascend:v0.23.0"
    [wrapped] = FILTERS.vllm_serve_containerize(items, {"image": image, "command": official})
    after = wrapped["argv"][wrapped["argv"].index(image) + 1 :]
    assert after == ["python3", "-m", "vllm.entrypoints.openai.api_server", *items[0]["args"]]
    # a headless worker keeps its own command (vllm serve)
    worker = {**items[0], "argv": ["python3", "-m", "w", *items[0]["args"]]}
    [wrapped] = FILTERS.vllm_serve_containerize([worker], {"image": image, "command": official})
    assert wrapped["argv"][wrapped["argv"].index(image) + 1] == "python3"
    assert wrapped["argv"][wrapped["argv"].index(image) + 3] == "w"
    from ansible.errors import AnsibleFilterError

    for bad in ("auto", ["ok", ""], {"a": 1}):
        with pytest.raises(AnsibleFilterError, match="a list of words"):
            FILTERS.vllm_serve_image_command(bad, None)


def test_filter_container_paths_and_image_tag() -> None:
    items = FILTERS.vllm_serve_instances([POOL_23], TP2, [])
    devices = ["/dev/davinci2", "/dev/davinci3", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    assert FILTERS.vllm_serve_container_paths(items, devices_only=True) == devices
    assert FILTERS.vllm_serve_container_paths(items) == [*devices, *container.DRIVER_MOUNTS]
    assert FILTERS.vllm_serve_container_paths([]) == []
    assert FILTERS.vllm_serve_image_tag("", "aarch64") == "0.23.0-cann9.1.0-openeuler24.03-arm64"
    assert FILTERS.vllm_serve_image_tag("0.23.0", "x86_64", "ubuntu22.04", "a3") == (
        "0.23.0-cann9.1.0-a3-ubuntu22.04-amd64"
    )

"""The one rule for values that reach a file, a command or a template (provision.inventory.rules), planted
in an inventory kind by kind: `provision validate` refuses each with exit 2 naming file, scope and field,
and never a traceback; the preflight role's filter and the serving filters refuse the same with the same
code. And what a node reports through `provision bootstrap` stays data: a real ansible-playbook run on the
written inventory runs nothing on the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inventory import rules
from provision.inventory.load import load_inventory
from provision.inventory.profiles import ProfileError, all_profiles, profile_env
from provision.inventory.validate import host_issues
from provision.serving import container
from tests.helpers import GOOD_INI, run_cli, write_tree

pytestmark = pytest.mark.unit

SMALL_PROFILE = "{model: /models/m, tensor_parallel_size: 1}"

# (id, group_vars/npu_nodes.yml text, the field the message must name, a phrase of the message)
PLANTED: list[tuple[str, str, str, str]] = [
    (
        "profile-name-newline",
        'vllm_serve_profiles: {"chat\\nExecStartPre=/bin/sh -c id": ' + SMALL_PROFILE + "}\n",
        "vllm_serve_profiles.'chat\\nExecStartPre=/bin/sh -c id'",
        "control character (a line break)",
    ),
    (
        "profile-name-pattern",
        'vllm_serve_profiles: {"chat profile": ' + SMALL_PROFILE + "}\n",
        "vllm_serve_profiles.chat profile",
        "invalid profile name",
    ),
    (
        "pool-name-trailing-newline",
        'npu_pools_list: [{name: "chat\\n", devices: [0], port: 8000}]\n',
        "npu_pools_list[0].name",
        "control character",
    ),
    (
        "env-key-ld-preload-line",
        'vllm_serve_env: {LD_PRELOAD: "libjemalloc.so.2\\nLD_AUDIT=/tmp/x.so"}\n',
        "vllm_serve_env.LD_PRELOAD",
        "control character",
    ),
    (
        "env-key-ld-preload-shell",
        'vllm_serve_env: {LD_PRELOAD: "$(id).so"}\n',
        "vllm_serve_env.LD_PRELOAD",
        "library names or absolute paths",
    ),
    (
        "env-key-api-key",
        "vllm_serve_env: {VLLM_API_KEY: secret}\n",
        "vllm_serve_env.VLLM_API_KEY",
        "vllm_serve_api_key",
    ),
    (
        "env-key-visible-devices",
        "vllm_serve_env: {ASCEND_RT_VISIBLE_DEVICES: '0,1'}\n",
        "vllm_serve_env.ASCEND_RT_VISIBLE_DEVICES",
        "the pool's devices",
    ),
    ("env-key-lower-case", "vllm_serve_env: {'path': /x}\n", "vllm_serve_env.path", "invalid env name"),
    (
        "env-value-newline",
        'vllm_serve_env: {HCCL_CONNECT_TIMEOUT: "7200\\nVLLM_API_KEY=x"}\n',
        "vllm_serve_env.HCCL_CONNECT_TIMEOUT",
        "control character",
    ),
    (
        "profile-env-key",
        "vllm_serve_profiles: {p1: {model: /m, env: {LD_PRELOAD: 'a;b'}}}\n",
        "vllm_serve_profiles.p1.env",
        "LD_PRELOAD",
    ),
    (
        "model-path-newline",
        'vllm_serve_profiles: {p1: {model: "/models/m\\n--trust-remote-code"}}\n',
        "vllm_serve_profiles.p1.model",
        "control character",
    ),
    (
        "served-model-name",
        'vllm_serve_profiles: {p1: {model: /m, served_model_name: "m\\rx"}}\n',
        "vllm_serve_profiles.p1.served_model_name",
        "control character (a carriage return)",
    ),
    (
        "extra-args-escape",
        'vllm_serve_profiles: {p1: {model: /m, extra_args: ["--seed\\u001b[2J"]}}\n',
        "vllm_serve_profiles.p1.extra_args[0]",
        "control character (U+001B)",
    ),
    (
        "image-command-word",
        'vllm_serve_image_command: ["vllm\\nserve"]\n',
        "vllm_serve_image_command[0]",
        "control character",
    ),
    (
        "container-volume",
        'vllm_serve_container_volumes: ["/data\\x00:/data"]\n',
        "vllm_serve_container_volumes[0]",
        "control character (NUL)",
    ),
    (
        "profile-d-script",
        'cann_profile_script: "/etc/profile.d/ascend.sh\\ncurl x | sh"\n',
        "cann_profile_script",
        "control character",
    ),
    (
        "unit-file-folder",
        'vllm_serve_config_dir: "/etc/provision/serve\\nExecStartPre=/bin/id"\n',
        "vllm_serve_config_dir",
        "control character",
    ),
    (
        "templated-value-keeps-its-newline",
        "vllm_serve_user: \"{{ 'root' }}\\nExecStartPre=/bin/id\"\n",
        "vllm_serve_user",
        "control character",
    ),
    (
        "container-cap-add",
        "vllm_serve_container_args: [--cap-add=ALL]\n",
        "vllm_serve_container_args[0]",
        "--cap-add is not among the allowed",
    ),
    (
        "container-host-root",
        "vllm_serve_container_args: [-v, '/:/host']\n",
        "vllm_serve_container_args[0]",
        "-v: set vllm_serve_container_volumes",
    ),
    (
        "container-pid-host",
        "vllm_serve_container_args: [--pid=host]\n",
        "vllm_serve_container_args[0]",
        "--pid is not among the allowed",
    ),
    (
        "container-security-opt",
        "vllm_serve_container_args: [--security-opt, seccomp=unconfined]\n",
        "vllm_serve_container_args[1]",
        "not a value it may take",
    ),
    ("budget-inf", "vllm_serve_load_budget_s: .inf\n", "vllm_serve_load_budget_s", "finite"),
    ("budget-nan", "vllm_serve_load_budget_s: .nan\n", "vllm_serve_load_budget_s", "finite"),
    ("budget-absurd", "vllm_serve_load_budget_s: 1.0e+12\n", "vllm_serve_load_budget_s", "at most 604800"),
    (
        "profile-budget-inf",
        "vllm_serve_profiles: {p1: {model: /m, load_budget_s: .inf}}\n",
        "vllm_serve_profiles.p1.load_budget_s",
        "finite",
    ),
    ("stop-timeout-negative", "vllm_serve_stop_timeout_s: -1\n", "vllm_serve_stop_timeout_s", "above 0"),
    ("monitoring-port", "monitoring_npu_exporter_port: 99999999\n", "monitoring_npu_exporter_port", "65535"),
    (
        "bench-gate-prompts",
        "vllm_serve_bench_gate: {num_prompts: -5}\n",
        "vllm_serve_bench_gate.num_prompts",
        "at least 1",
    ),
    (
        "bench-gate-type",
        "vllm_serve_bench_gate: {timeout_s: soon}\n",
        "vllm_serve_bench_gate.timeout_s",
        "must be a number",
    ),
    (
        "lookalike-name",
        "vllm_sеrve_env: {HCCL_CONNECT_TIMEOUT: '7200'}\n",
        "vllm_sеrve_env",
        "CYRILLIC SMALL LETTER IE",
    ),
    (
        "templated-interpreter",
        "ansible_python_interpreter: \"{{ lookup('pipe', 'id') }}\"\n",
        "ansible_python_interpreter",
        "not a template",
    ),
    (
        "interpreter-with-shell",
        "ansible_python_interpreter: /usr/bin/python3; id\n",
        "ansible_python_interpreter",
        "plain absolute path",
    ),
    (
        "templated-discovered-fact",
        "bootstrap_facts: {os: {pretty_name: \"{{ lookup('pipe', 'id') }}\"}}\n",
        "bootstrap_facts.os.pretty_name",
        "discovered on the node",
    ),
]


@pytest.mark.parametrize(("text", "field", "phrase"), [p[1:] for p in PLANTED], ids=[p[0] for p in PLANTED])
def test_validate_refuses_each_injection(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    field: str,
    phrase: str,
) -> None:
    write_tree(tmp_path, {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": text})
    code = run_cli(["validate", str(tmp_path / "inventory.ini")], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("  group_vars/npu_nodes.yml:1: ")]
    assert lines, err
    [line] = [line for line in lines if f": group npu_nodes: {field}" in line]
    assert phrase in line
    # Every problem is on one line of its own: a value's line break never reaches the terminal raw.
    assert all(line.startswith(("error: ", "  ")) for line in err.splitlines() if line)


def test_preflight_filter_refuses_with_the_same_words() -> None:
    """The preflight role runs host_issues (its filter) on the variables Ansible hands it: same code."""
    issues = host_issues(
        "node1",
        {
            "vllm_serve_env": {"VLLM_API_KEY": "x", "OK_NAME": "line\nbreak"},
            "vllm_serve_container_args": ["--privileged"],
            "vllm_serve_load_budget_s": float("inf"),
            "npu_pools_list": [{"name": "chat\n", "devices": [0], "port": 8000}],
        },
    )
    joined = "\n".join(issues)
    assert "vllm_serve_env.VLLM_API_KEY = 'x': may not be set in vllm_serve_env" in joined
    assert "vllm_serve_env.OK_NAME = 'line\\nbreak': holds a control character (a line break)" in joined
    assert "vllm_serve_container_args[0] = '--privileged': --privileged: the pool's NPUs" in joined
    assert "vllm_serve_load_budget_s = inf: must be a finite number" in joined
    assert "npu_pools_list[0].name = 'chat\\n': holds a control character" in joined


def test_serving_filters_refuse_what_validate_refuses() -> None:
    """What plain ansible-playbook skips validate for still stops at the filters, before a file is written."""
    with pytest.raises(ProfileError, match=r"vllm_serve_env\.LD_AUDIT.*control character"):
        profile_env(all_profiles()["chat-32b-tp8"], {"LD_AUDIT": "x\ny"})
    with pytest.raises(ProfileError, match="may not be set in vllm_serve_env"):
        profile_env(all_profiles()["chat-32b-tp8"], {"ASCEND_RT_VISIBLE_DEVICES": "7"})
    with pytest.raises(ProfileError, match="control character"):
        all_profiles({"chat\nExecStartPre=/bin/id": {"model": "/m"}})
    with pytest.raises(InputError, match=r"\[0\] --cap-add is not among the allowed"):
        container.ContainerSettings(image="i:1", extra_args=["--cap-add", "SYS_ADMIN"])
    allowed = ["--ulimit", "memlock=-1", "--group-add", "1000", "--cpus=32", "--init", "--label", "a=b"]
    assert container.ContainerSettings(image="i:1", extra_args=allowed).extra_args == allowed


def test_rules_on_the_edges() -> None:
    assert rules.control_problem("plain text: ok, é, 漢字") is None
    for char in ("\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028"):
        assert rules.control_problem(f"a{char}b") is not None, repr(char)
    assert rules.name_problem("pool", "chat") is None
    assert rules.name_problem("pool", "chat\n") is not None  # `$` alone would let it through
    assert rules.interpreter_problem("/usr/bin/python3.11") is None
    assert rules.interpreter_problem("auto_silent") is None
    assert rules.interpreter_problem("/opt/{{x}}/python3") is not None
    assert rules.env_value_problem("LD_PRELOAD", "libjemalloc.so.2 /usr/lib64/libtcmalloc.so") is None
    assert rules.env_value_problem("FLAG", True) is None
    assert rules.limit_problems("vllm_serve_ready_port", 8099) == []
    assert rules.container_args_problems(["--ulimit"]) == [
        ((0,), "--ulimit needs a value, e.g. --ulimit memlock=-1")
    ]


def test_every_number_of_the_argument_specs_has_a_range() -> None:
    """A role's new int or float option gets its range here, or this fails (argument specs bound none)."""
    from provision.inventory import argspecs

    numbers = {
        name
        for name, spec in argspecs.role_options().items()
        if spec.get("type") in ("int", "float") and name not in rules.ROLE_LIMITS
    }
    assert numbers == set()
    for name, subs in rules.SUBOPTION_LIMITS.items():
        options = argspecs.role_options()[name]["options"]
        assert set(subs) == {k for k, v in options.items() if v.get("type") in ("int", "float")}


def test_validate_reads_the_variables_apply_reads_not_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """group_vars/ of the folder validate runs in are not what ansible-playbook reads for the collection's
    playbooks (it reads those beside the inventory and beside the playbook): validate must not read them
    either, or it judges values apply never sees."""
    write_tree(
        tmp_path / "site", {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "cann_version: '9.1.0'\n"}
    )
    write_tree(tmp_path / "elsewhere", {"group_vars/npu_nodes.yml": "npu_pools_list: 5\n"})
    monkeypatch.chdir(tmp_path / "elsewhere")
    code = run_cli(["validate", str(tmp_path / "site" / "inventory.ini")], monkeypatch)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert load_inventory(tmp_path / "site" / "inventory.ini").hosts["node1"]["cann_version"] == "9.1.0"
    assert "npu_pools_list" not in load_inventory(tmp_path / "site" / "inventory.ini").hosts["node1"]

"""The container_runtime role's filters: daemon.json parsing and merging, the per-pool verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import load_module

pytestmark = pytest.mark.unit

ROLE = Path(__file__).resolve().parents[2] / "roles" / "container_runtime"
RUNTIME = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"


F = load_module("container_runtime_filters", ROLE.parents[1] / "plugins" / "filter" / "container_runtime.py")


def test_every_filter_is_registered() -> None:
    names = set(F.FilterModule().filters())
    assert names == {n for n in dir(F) if n.startswith("container_runtime_")}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ('{"runtimes": []}', '"runtimes" is not an object'),
        ('{"runtimes": {"ascend": "x"}}', '"runtimes.ascend" is not an object'),
    ],
)
def test_unusable_daemon_json_is_refused(text: str, error: str) -> None:
    parsed = F.container_runtime_parse_daemon_json(text)
    assert not parsed["ok"]
    assert error in parsed["error"]


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_missing_or_empty_daemon_json_is_an_empty_object(text: str | None) -> None:
    assert F.container_runtime_parse_daemon_json(text) == {"ok": True, "data": {}, "error": ""}


def test_merge_keeps_every_user_key_and_sets_only_ascend() -> None:
    user: dict[str, Any] = {
        "log-driver": "json-file",
        "log-opts": {"max-size": "100m"},
        "insecure-registries": ["10.0.0.5:5000"],
        "data-root": "/data/docker",
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}},
    }
    before = json.loads(json.dumps(user))
    merged = F.container_runtime_merge_daemon_json(user, RUNTIME)
    assert user == before  # not modified in place
    assert merged == {
        **user,
        "runtimes": {
            "nvidia": {"path": "nvidia-container-runtime"},
            "ascend": {"path": RUNTIME, "runtimeArgs": []},
        },
        "default-runtime": "ascend",
    }


def test_merge_is_idempotent_and_keeps_runtime_args() -> None:
    current = {"runtimes": {"ascend": {"path": "/old/ascend-docker-runtime", "runtimeArgs": ["--debug"]}}}
    before = json.loads(json.dumps(current))
    once = F.container_runtime_merge_daemon_json(current, RUNTIME)
    assert current == before  # not modified in place, the runtime it changes included
    assert once["runtimes"]["ascend"] == {"path": RUNTIME, "runtimeArgs": ["--debug"]}
    assert F.container_runtime_merge_daemon_json(once, RUNTIME) == once


def test_merge_without_default_runtime_leaves_the_users_default() -> None:
    merged = F.container_runtime_merge_daemon_json({"default-runtime": "runc"}, RUNTIME, False)
    assert merged["default-runtime"] == "runc"
    assert merged["runtimes"]["ascend"]["path"] == RUNTIME
    assert "default-runtime" not in F.container_runtime_merge_daemon_json({}, RUNTIME, False)


def test_merge_of_the_installers_output_changes_nothing() -> None:
    """After a fresh install the installer already wrote what the role wants: no second write, no diff."""
    from provision_sim.hardware.node.ascendsim import docker_runtime

    text = docker_runtime.merge_daemon_json('{"log-driver": "local"}', RUNTIME)
    current = F.container_runtime_parse_daemon_json(text)["data"]
    assert F.container_runtime_merge_daemon_json(current, RUNTIME) == current
    template = F.container_runtime_parse_daemon_json(docker_runtime.merge_daemon_json(None, RUNTIME))["data"]
    assert F.container_runtime_merge_daemon_json(template, RUNTIME) == template


LS_DEV = "console\ndavinci1\ndavinci0\ndavinci_manager\ndevmm_svm\nfd\nhisi_hdc\nnull\nzero\n"


def test_seen_devices() -> None:
    assert F.container_runtime_seen_devices(LS_DEV) == [0, 1]
    assert F.container_runtime_seen_devices("null\nzero\ndavinci_manager\n") == []


def test_verdict_exactly_the_pool() -> None:
    pool = {"name": "chat", "devices": [1, 0]}
    verdict = F.container_runtime_verdict({"rc": 0, "stdout": LS_DEV}, pool, "node1", "img:1")
    assert verdict == {
        "ok": True,
        "seen": [0, 1],
        "message": "node1: pool chat: container sees exactly /dev/davinci0, /dev/davinci1",
    }


def test_verdict_names_host_pool_expected_and_seen() -> None:
    pool = {"name": "batch", "devices": [4, 5]}
    verdict = F.container_runtime_verdict({"rc": 0, "stdout": "null\nzero\n"}, pool, "node2", "img:1")
    assert not verdict["ok"]
    message = verdict["message"]
    assert message.startswith("node2: pool batch: a container given ASCEND_VISIBLE_DEVICES=4,5 should see ")
    assert "exactly /dev/davinci4, /dev/davinci5 but saw none" in message
    assert "missing /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc" in message
    too_many = F.container_runtime_verdict({"rc": 0, "stdout": LS_DEV + "davinci4\n"}, pool, "n", "i")
    assert "but saw /dev/davinci0, /dev/davinci1, /dev/davinci4" in too_many["message"]


def test_verdict_of_a_container_that_did_not_run_quotes_the_engine() -> None:
    err = (
        "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: "
        "failed to get /dev/davinci9 info : lstat /dev/davinci9: no such file or directory: unknown."
    )
    verdict = F.container_runtime_verdict(
        {"rc": 125, "stdout": "", "stderr": err}, {"name": "x", "devices": [9]}, "node1", "img:1"
    )
    assert not verdict["ok"]
    assert (
        "node1: pool x: the verification container (image img:1, ASCEND_VISIBLE_DEVICES=9) did not run "
        "(exit 125)" in verdict["message"]
    )
    assert "lstat /dev/davinci9: no such file or directory" in verdict["message"]


def test_defaults_document_every_verify_mode() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert defaults["container_runtime_verify"] in options["container_runtime_verify"]["choices"]
    assert options["container_runtime_verify"]["choices"] == ["changed", "always", "never"]

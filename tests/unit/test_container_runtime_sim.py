"""The simulated MindCluster Ascend Docker Runtime: the .run installer and the OCI runtime's spec edit."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from provision.ascend import lock
from provision_sim.hardware.node.ascendsim import docker_runtime as rt
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror import run_files as mirror

pytestmark = pytest.mark.unit

ARCH = os.uname().machine
OTHER = "aarch64" if ARCH == "x86_64" else "x86_64"
VERSION = str(lock.default_stack()["docker_runtime"])
RUNTIME = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mirror")
    (ours,) = mirror.build_artifacts(folder, arch=ARCH, docker_runtime=VERSION, components=["docker-runtime"])
    (other,) = mirror.build_artifacts(
        folder, arch=OTHER, docker_runtime=VERSION, components=["docker-runtime"]
    )
    (older,) = mirror.build_artifacts(
        folder, arch=ARCH, docker_runtime="7.3.0", components=["docker-runtime"]
    )
    return {"ours": ours, "other": other, "older": older}


@pytest.fixture
def sim(tmp_path: Path) -> SimRoot:
    return SimRoot.create(tmp_path / "node")


def test_file_name_follows_the_lock(runs: dict[str, Path]) -> None:
    assert runs["ours"].name == f"Ascend-docker-runtime_{VERSION}_linux-{ARCH}.run"


def test_install_asks_the_eula_and_merges_daemon_json_like_the_helper(
    sim: SimRoot, runs: dict[str, Path]
) -> None:
    daemon = sim.path("/etc/docker/daemon.json")
    daemon.parent.mkdir(parents=True)
    daemon.write_text('{"log-driver": "json-file", "insecure-registries": ["r:5000"]}\n')
    res = sim.run([runs["ours"], "--install", "--install-scene=docker"], input="y\n")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert "Do you accept the EULA to install Ascend-docker-runtime?[Y/N]" in lines
    assert "[INFO] user accepted EULA" in lines
    assert f"[INFO] platform({ARCH}) matched!" in lines
    assert "[INFO] /etc/docker/daemon.json modify success" in lines
    assert f"[INFO] The version of ascend-docker-runtime is: {VERSION}" in lines
    assert lines[-1] == "[INFO] ascend-docker-runtime install success"
    text = daemon.read_text()
    assert json.loads(text) == {
        "default-runtime": "ascend",
        "insecure-registries": ["r:5000"],
        "log-driver": "json-file",
        "runtimes": {"ascend": {"path": RUNTIME, "runtimeArgs": []}},
    }
    assert text.startswith('{\n        "default-runtime": "ascend",')  # Go's MarshalIndent: 8 spaces, sorted
    assert daemon.stat().st_mode & 0o777 == 0o600
    info = sim.path("/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info").read_text()
    assert f"version=v{VERSION}\n" in info and "install-scene=docker\n" in info
    assert "/usr/local/Ascend/driver/lib64" in sim.path("/etc/ascend-docker-runtime.d/base.list").read_text()
    log = sim.path("/var/log/ascend-docker-runtime/installer.log").read_text()
    assert "[ascend-docker-runtime] ascend-docker-runtime install success" in log


def test_install_without_daemon_json_writes_the_helpers_template(sim: SimRoot, runs: dict[str, Path]) -> None:
    assert sim.run([runs["ours"], "--install"], input="y\n").returncode == 0
    assert sim.path("/etc/docker/daemon.json").read_text() == rt.COMMON_TEMPLATE % RUNTIME


def test_declining_the_eula_exits_0_without_installing(sim: SimRoot, runs: dict[str, Path]) -> None:
    res = sim.run([runs["ours"], "--install"], input="n\n")
    assert res.returncode == 0
    assert "[INFO] install cancelled, user declined EULA" in res.stdout
    assert not sim.path("/usr/local/Ascend/Ascend-Docker-Runtime").exists()
    res = sim.run([runs["ours"], "--install"])  # no answer at all
    assert res.returncode == 1 and "no answer to the EULA question" in res.stdout


def test_failures_of_the_documented_contract(sim: SimRoot, runs: dict[str, Path]) -> None:
    res = sim.run([runs["other"], "--install"], input="y\n")
    assert res.returncode == 1
    assert f"[ERROR] platform({ARCH}) mismatch" in res.stdout
    assert "[ERROR] install failed, run package and os not matched in arch" in res.stdout
    res = sim.run([runs["ours"], "--install", "--install", "--quiet"])
    assert res.returncode == 1 and "[ERROR] failed, '--install' Repeat parameter!" in res.stdout
    res = sim.run([runs["ours"], "--install-scene=podman", "--install"])
    assert res.returncode == 1 and "please check the parameter of --install-scene=<scene>" in res.stdout
    res = sim.run([runs["ours"], "--install-path=/opt"])
    assert res.returncode == 1 and "When use --install-path you also need input" in res.stdout
    res = sim.run([runs["ours"], "--upgrade"], input="y\n")
    assert res.returncode == 1 and "the specified install path does not exist" in res.stdout


def test_a_daemon_json_it_cannot_use_fails_after_copying_the_binaries(
    sim: SimRoot, runs: dict[str, Path]
) -> None:
    daemon = sim.path("/etc/docker/daemon.json")
    daemon.parent.mkdir(parents=True)
    daemon.write_text("{not json")
    res = sim.run([runs["ours"], "--install"], input="y\n")
    assert res.returncode == 1
    assert (
        "[ERROR] install failed, './ascend-docker-plugin-install-helper add /etc/docker/daemon.json"
        in res.stdout
    )
    assert daemon.read_text() == "{not json"
    assert sim.path(RUNTIME).exists()  # as on a real host: the files went in before the helper failed
    daemon.write_text("{}")
    daemon.chmod(0o666)
    res = sim.run([runs["ours"], "--install"], input="y\n")
    assert res.returncode == 1
    assert "[ERROR] group or other of /etc/docker/daemon.json has write permission" in res.stdout


def test_upgrade_keeps_daemon_json_and_uninstall_removes_only_ascend(
    sim: SimRoot, runs: dict[str, Path]
) -> None:
    assert sim.run([runs["older"], "--install"], input="y\n").returncode == 0
    daemon = sim.path("/etc/docker/daemon.json")
    data = json.loads(daemon.read_text())
    data["log-level"] = "warn"
    daemon.write_text(json.dumps(data))
    res = sim.run([runs["ours"], "--upgrade"], input="y\n")
    assert res.returncode == 0, res.stdout
    assert f"[INFO] The version of ascend-docker-runtime is: v{VERSION}" in res.stdout
    assert json.loads(daemon.read_text()) == data
    info = sim.path("/usr/local/Ascend/Ascend-Docker-Runtime/ascend_docker_runtime_install.info").read_text()
    assert f"version=v{VERSION}\n" in info
    res = sim.run(["sh", sim.path("/usr/local/Ascend/Ascend-Docker-Runtime/script/uninstall.sh")])
    assert res.returncode == 0, res.stdout
    assert json.loads(daemon.read_text()) == {"log-level": "warn", "runtimes": {}}
    assert not sim.path("/usr/local/Ascend/Ascend-Docker-Runtime").exists()


# ------------------------------------------------------------------------------------------------
# the OCI runtime
# ------------------------------------------------------------------------------------------------

MAJORS = {"davinci_manager": 237, "devmm_svm": 238, "hisi_hdc": 239}


def fake_device(path: str) -> rt.DeviceNode:
    name = path.removeprefix("/dev/")
    if name.startswith("davinci") and name[7:].isdigit():
        if int(name[7:]) >= 8:
            raise rt.SpecError(f"failed to get {path} info : lstat {path}: no such file or directory")
        return rt.DeviceNode(path, "c", 236, int(name[7:]), 0o660, 0, 1000)
    return rt.DeviceNode(path, "c", MAJORS[name], 0, 0o660, 0, 1000)


def spec(env: list[str]) -> dict[str, Any]:
    return {
        "process": {"env": ["PATH=/bin", *env]},
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
        "mounts": [],
    }


def edit(
    env: list[str], present: tuple[str, ...] = ("/usr/local/bin/npu-smi", "/etc/ascend_install.info")
) -> dict[str, Any]:
    return rt.edit_spec(spec(env), device=fake_device, exists=lambda p: p in present)


def test_spec_gets_exactly_the_visible_devices_and_the_managers() -> None:
    out = edit(["ASCEND_VISIBLE_DEVICES=2,3"])
    paths = [d["path"] for d in out["linux"]["devices"]]
    assert paths == [
        "/dev/davinci2",
        "/dev/davinci3",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]
    assert out["linux"]["devices"][1] == {
        "path": "/dev/davinci3",
        "type": "c",
        "major": 236,
        "minor": 3,
        "fileMode": 0o660,
        "uid": 0,
        "gid": 1000,
    }
    rules = out["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # the engine's deny-all stays first
    assert {"allow": True, "type": "c", "major": 236, "minor": 2, "access": "rwm"} in rules
    assert len(rules) == 6
    assert [m["destination"] for m in out["mounts"]] == ["/etc/ascend_install.info", "/usr/local/bin/npu-smi"]
    assert all(m["options"] == ["rbind", "ro"] for m in out["mounts"])
    assert out["process"]["env"][-1] == "ASCEND_DOCKER_RUNTIME=True"


@pytest.mark.parametrize(
    ("value", "ids"),
    [("0-3", [0, 1, 2, 3]), ("3,1,1", [1, 3]), ("0, 2-3", [0, 2, 3]), ("Ascend910-5,Ascend910-4", [4, 5])],
)
def test_visible_device_syntax(value: str, ids: list[int]) -> None:
    assert rt.parse_visible_devices(value) == ids


def test_last_assignment_wins_and_void_or_empty_means_no_npu() -> None:
    out = edit(["ASCEND_VISIBLE_DEVICES=0", "ASCEND_VISIBLE_DEVICES=1"])
    assert out["linux"]["devices"][0]["path"] == "/dev/davinci1"
    for env in (["ASCEND_VISIBLE_DEVICES=void"], ["ASCEND_VISIBLE_DEVICES="], []):
        out = edit(env)
        assert "devices" not in out["linux"] and out["mounts"] == []
        assert out["process"]["env"][-1] == "ASCEND_DOCKER_RUNTIME=True"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "9",
            "failed to add device to env: failed to add davinci device to spec: failed to get /dev/davinci9 "
            "info : lstat /dev/davinci9: no such file or directory",
        ),
        (
            "x",
            "failed to check ASCEND_VISIBLE_DEVICES parameter, err: failed to parse device : invalid single "
            "device parameter: x",
        ),
        ("3-1", "left boarder (3) should not be larger than the right one(1)"),
        ("0-200", "invalid right boarder range parameter: 200"),
        ("Ascend310P-1", "chip type not match really: 310P"),
    ],
)
def test_refusals_use_the_runtimes_words(value: str, message: str) -> None:
    with pytest.raises(rt.SpecError) as err:
        edit([f"ASCEND_VISIBLE_DEVICES={value}"])
    assert message in str(err.value)


def test_oci_main_rewrites_the_bundle_and_execs_runc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(spec(["ASCEND_VISIBLE_DEVICES=1"])))
    execs: list[list[str]] = []

    def fake_exec(path: str, argv: list[str]) -> None:
        execs.append(argv)

    monkeypatch.setenv("PROVISION_SIM_ROOT", str(tmp_path / "root"))
    original = rt.edit_spec
    monkeypatch.setattr(rt.os, "execv", fake_exec)
    monkeypatch.setattr(rt, "_runc", lambda: "/usr/sbin/runc")
    monkeypatch.setattr(rt, "edit_spec", lambda s: original(s, device=fake_device, exists=lambda _p: False))
    argv = ["--root", "/run/x", "--log", str(tmp_path / "log.json"), "create", "--bundle", str(bundle), "id1"]
    assert rt.oci_main(argv) == 1  # execv returned (a fake): the real one never does
    assert execs == [["/usr/sbin/runc", *argv]]
    written = json.loads((bundle / "config.json").read_text())
    assert written["linux"]["devices"][0]["path"] == "/dev/davinci1"
    # a refused device: nothing exec'd, the error in the shim's log as runc writes it
    (bundle / "config.json").write_text(json.dumps(spec(["ASCEND_VISIBLE_DEVICES=9"])))
    execs.clear()
    assert rt.oci_main(argv) == 1
    assert execs == []
    entry = json.loads((tmp_path / "log.json").read_text().splitlines()[-1])
    assert entry["level"] == "error"
    assert entry["msg"].startswith(f"failed to modify spec file {bundle}/config.json: failed to add device")
    # other commands go straight to runc
    assert rt.oci_main(["state", "id1"]) == 1 and execs == [["/usr/sbin/runc", "state", "id1"]]

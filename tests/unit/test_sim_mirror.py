"""The local mirror's vendor artifacts: Huawei file names, sha256sums.txt, several versions per folder."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.errors import ProvisionError
from provision_sim.mirror import run_files as mirror

pytestmark = pytest.mark.unit


def test_names_for_cann_9(tmp_path: Path) -> None:
    built = mirror.build_artifacts(tmp_path)
    assert [p.name for p in built] == [
        "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run",
        "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run",
        "Ascend-cann-toolkit_9.1.0_linux-aarch64.run",
        "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run",
        "Ascend-cann-nnal_9.1.0_linux-aarch64.run",
        "Ascend-docker-runtime_26.1.0_linux-aarch64.run",
    ]
    assert all(p.stat().st_mode & 0o777 == 0o755 for p in built)
    assert all(p.read_bytes().startswith(b"#!/bin/sh\n") for p in built)


def test_names_for_cann_8_3_use_the_kernels_package(tmp_path: Path) -> None:
    specs = mirror.artifact_specs(arch="x86_64", driver="25.0.rc1.1", cann="8.3.RC2", nnal="8.3.RC1")
    names = [s.name for s in specs]
    assert "Ascend-cann-kernels-910b_8.3.RC2_linux-x86_64.run" in names
    assert "Ascend-cann-nnal_8.3.RC1_linux-x86_64.run" in names
    assert not any("910b-ops" in n for n in names)
    kernels = next(s for s in specs if "kernels" in s.name)
    assert kernels.manifest["component"] == "kernels"
    driver = next(s for s in specs if "driver" in s.name)
    assert driver.manifest["compatible_fw"] == ["7.0.0", "7.7.99"]


@pytest.mark.parametrize(
    ("line", "names"),
    [
        (
            "a3",
            [
                "Atlas-A3-hdk-npu-driver_25.5.1_linux-aarch64.run",
                "Atlas-A3-hdk-npu-firmware_7.8.0.6.201.run",
                "Ascend-cann-A3-ops_9.1.0_linux-aarch64.run",
            ],
        ),
        (
            "310p",
            [
                "Ascend-hdk-310p-npu-driver_25.5.1_linux-aarch64.run",
                "Ascend-hdk-310p-npu-firmware_7.8.0.6.201.run",
                "Ascend-cann-310p-ops_9.1.0_linux-aarch64.run",
            ],
        ),
    ],
)
def test_each_npu_line_gets_the_vendor_names_the_roles_fetch(line: str, names: list[str]) -> None:
    specs = mirror.artifact_specs(components=["driver", "firmware", "ops"], line=line)
    assert [s.name for s in specs] == names
    assert {s.manifest["chip"] for s in specs} == {line}
    with pytest.raises(ProvisionError, match="unknown NPU line '910c'; known: 910b, a3, 310p"):
        mirror.artifact_specs(line="910c")


def test_sha256sums_cover_every_version_in_the_folder(tmp_path: Path) -> None:
    first = mirror.build_artifacts(tmp_path, components=["driver", "firmware"])
    second = mirror.build_artifacts(
        tmp_path, driver="25.0.rc1.1", firmware="7.7.0.1.231", components=["driver", "firmware"]
    )
    assert len(first) == len(second) == 2
    lines = (tmp_path / "sha256sums.txt").read_text().splitlines()
    runs = sorted(tmp_path.glob("*.run"))
    assert len(runs) == 4
    assert lines == [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in runs]
    if shutil.which("sha256sum"):
        res = subprocess.run(
            ["sha256sum", "-c", "sha256sums.txt"], cwd=tmp_path, capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr


def test_builds_are_deterministic(tmp_path: Path) -> None:
    a = mirror.build_artifacts(tmp_path / "a", components=["toolkit"])
    b = mirror.build_artifacts(tmp_path / "b", components=["toolkit"])
    assert a[0].read_bytes() == b[0].read_bytes()


def test_invalid_requests(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="arch"):
        mirror.build_artifacts(tmp_path, arch="riscv64")
    with pytest.raises(ProvisionError, match="unknown components"):
        mirror.build_artifacts(tmp_path, components=["bios"])
    with pytest.raises(ProvisionError, match="invalid driver version"):
        mirror.build_artifacts(tmp_path, driver="25.5.1; rm -rf /")
    assert not list(tmp_path.glob("*.run"))


def test_payload_is_a_makeself_style_archive(tmp_path: Path) -> None:
    (run,) = mirror.build_artifacts(tmp_path, components=["nnal"])
    res = subprocess.run(["sh", str(run), "--list"], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in res.stdout.splitlines()}
    assert {"install.sh", "package.json", "ascendsim/installer.py", "ascendsim/npusmi.py"} <= names
    assert subprocess.run(["sh", str(run), "--version"], capture_output=True, text=True).stdout == "9.1.0\n"


# ------------------------------------------------------------------------------------------------
# container engine packages and images (provision_sim.mirror.repos / provision_sim.images)
# ------------------------------------------------------------------------------------------------


def test_docker_engine_rpm_repacks_the_debian_closure() -> None:
    from provision_sim.mirror import repos

    closure = {
        "docker.io": "20.10.24+dfsg1-1+deb12u1+b6",
        "containerd": "1.6.20~ds1-1",
        "iptables": "1.8.9-2",
    }
    assert "docker-engine" not in repos.rpm_packages("6.1.0-1-amd64")
    package = repos.rpm_packages("6.1.0-1-amd64", closure)["docker-engine"]
    assert package.version == "20.10.24"
    assert set(package.debs) == set(closure)
    assert "docker" in package.provides and not package.requires
    assert package.symlinks["/usr/sbin/iptables"] == "iptables-nft"
    assert package.symlinks["/usr/sbin/ip6tables-restore"] == "ip6tables-nft-restore"
    assert "systemctl enable docker" in package.post and "groupadd --system docker" in package.post


def test_node_exporter_rpm_has_openeulers_names_around_debians_binary(tmp_path: Path) -> None:
    """openEuler's golang-github-prometheus-node_exporter layout (node_exporter.service,
    /usr/sbin/node_exporter, /etc/sysconfig/node_exporter, the node_exporter user) holding the binary of
    Debian's deb, and nothing else of that deb (no second unit under Debian's name)."""
    from provision_sim.mirror import node_exporter, repos

    assert node_exporter.DEB in repos.DEBIAN_PACKAGES, "the Ubuntu flavour's package is Debian's deb as it is"
    assert node_exporter.RPM not in repos.rpm_packages("6.1.0-1-amd64")
    package = repos.rpm_packages("6.1.0-1-amd64", node_exporter_version="1.5.0-1+b6")[node_exporter.RPM]
    assert package.version == "1.5.0" and "node_exporter" in package.provides
    deb_root = tmp_path / "deb"
    binary = deb_root / "usr/bin/prometheus-node-exporter"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho node_exporter\n")
    binary.chmod(0o755)
    unit = deb_root / "lib/systemd/system/prometheus-node-exporter.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/prometheus-node-exporter $ARGS\n")
    (deb_root / "DEBIAN").mkdir()
    (deb_root / "DEBIAN/control").write_text(
        "Package: prometheus-node-exporter\nVersion: 1.5.0-1+b6\nArchitecture: all\n"
        "Maintainer: test <t@example.invalid>\nDescription: test\n"
    )
    deb = tmp_path / "prometheus-node-exporter_1.5.0-1+b6_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(deb_root), str(deb)], check=True)

    tree = tmp_path / "tree"
    repos.package_tree(tree, node_exporter.RPM, package, {node_exporter.DEB: deb})
    target = repos.Target("x86_64", "6.1.0-1-amd64", "amd64")
    rpm = repos._rpmbuild(tmp_path / "work", node_exporter.RPM, package, tree, target)

    def query(*args: str) -> str:
        done = subprocess.run(["rpm", "-qp", *args, str(rpm)], capture_output=True, text=True, check=True)
        return done.stdout

    assert query("--qf", "%{NAME} %{VERSION}") == "golang-github-prometheus-node_exporter 1.5.0"
    assert sorted(query("--list").split()) == [
        "/etc/sysconfig/node_exporter",
        "/usr/lib/systemd/system/node_exporter.service",
        f"{repos.POST_DIR}/{node_exporter.RPM}.post",
        "/usr/sbin/node_exporter",
    ]
    assert "node_exporter = 1.5.0" in query("--provides")
    assert (tree / "usr/sbin/node_exporter").read_text() == "#!/bin/sh\necho node_exporter\n"
    unit_text = (tree / "usr/lib/systemd/system/node_exporter.service").read_text()
    assert "User=node_exporter\n" in unit_text and "ExecStart=/usr/sbin/node_exporter $OPTIONS\n" in unit_text
    post = (tree / repos.POST_DIR.lstrip("/") / f"{node_exporter.RPM}.post").read_text()
    assert "useradd -rg node_exporter" in post and "systemctl start" not in post, "installing starts nothing"

    broken = repos.Package("x", "1", debs=(node_exporter.DEB,), deb_files={"/usr/sbin/x": "/usr/bin/missing"})
    with pytest.raises(ProvisionError, match="rpm x: /usr/bin/missing is in none of prometheus-node-expo"):
        repos.package_tree(tmp_path / "broken", "x", broken, {node_exporter.DEB: deb})


def test_group_vars_point_the_verification_at_the_mirrors_image() -> None:
    from provision_sim.mirror import repos

    text = repos.group_vars("http://10.200.0.1:8080")
    assert f"container_runtime_verify_image: {repos.VERIFY_IMAGE}\n" in text
    assert "container_runtime_verify_image_url: http://10.200.0.1:8080/images/busybox.tar\n" in text


def test_docker_save_format(tmp_path: Path) -> None:
    import json
    import tarfile

    from provision_sim import images

    layer = images.Layer.from_entries(
        [images.Entry("/bin/tool", data=b"#!/bin/sh\n", mode=0o755), images.Entry("/bin/alias", link="tool")]
    )
    dest = images.save_image(tmp_path / "a.tar", "example/tool:1", [layer], images.ImageConfig(cmd=["tool"]))
    again = images.save_image(tmp_path / "b.tar", "example/tool:1", [layer], images.ImageConfig(cmd=["tool"]))
    assert dest.read_bytes() == again.read_bytes()  # deterministic: a stable sha256 on the mirror
    with tarfile.open(dest) as tar:
        (manifest,) = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest["RepoTags"] == ["example/tool:1"]
        config = json.loads(tar.extractfile(manifest["Config"]).read())  # type: ignore[union-attr]
        layer_tar = tar.extractfile(manifest["Layers"][0]).read()  # type: ignore[union-attr]
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
    }
    assert config["config"]["Cmd"] == ["tool"] and config["os"] == "linux"
    assert (
        manifest["Config"]
        == hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        + ".json"
    )
    with tarfile.open(fileobj=__import__("io").BytesIO(layer_tar)) as inner:
        names = {m.name: m for m in inner.getmembers()}
    assert set(names) == {"bin", "bin/tool", "bin/alias"}
    assert names["bin/alias"].issym() and names["bin/alias"].linkname == "tool"
    assert names["bin/tool"].mode == 0o755
    with pytest.raises(ProvisionError, match="needs a :tag"):
        images.save_image(tmp_path / "c.tar", "example/tool", [layer])


def test_layer_from_a_tree_keeps_links_and_skips_excluded(tmp_path: Path) -> None:
    import io
    import tarfile

    from provision_sim import images

    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_text("py")
    (root / "bin").symlink_to("usr/bin")
    (root / "proc").mkdir()
    (root / "proc/junk").write_text("x")
    layer = images.Layer.from_tree(root, prefix="/opt/base", exclude=["proc"])
    with tarfile.open(fileobj=io.BytesIO(layer.tar)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert "opt/base/usr/bin/python3" in names and "opt/base/proc" not in names
    assert names["opt/base/bin"].issym() and names["opt/base/bin"].linkname == "usr/bin"
    assert "opt" in names and names["opt"].isdir()


def test_busybox_image_has_the_applets(tmp_path: Path) -> None:
    import json
    import tarfile

    from provision_sim import images

    dest = images.busybox_image(
        tmp_path / "bb.tar", b"\x7fELF static", "provision-sim/busybox:1", machine="aarch64"
    )
    with tarfile.open(dest) as tar:
        (manifest,) = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(manifest["Config"]).read())  # type: ignore[union-attr]
        with tarfile.open(fileobj=tar.extractfile(manifest["Layers"][0])) as layer:  # type: ignore[arg-type]
            names = set(layer.getnames())
    assert config["architecture"] == "arm64"
    assert {"bin/busybox", "bin/ls", "bin/sh", "dev", "etc/passwd", "tmp"} <= names

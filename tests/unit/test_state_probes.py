"""The one-task state probes of the converge: ``ascend_state`` (ascend_driver, cann) and the openeuler_repos
probe with its filter ``openeuler_repos_drift``. Both scripts run for real here, on files this test writes;
the parsers and the drift rules are pinned on their outputs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import load_module

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]


STATE = load_module("provision_action_ascend_state", ROOT / "plugins/action/ascend_state.py")
REPOS = load_module("provision_filter_openeuler_repos", ROOT / "plugins/filter/openeuler_repos.py")
REPOS_VARS = yaml.safe_load((ROOT / "roles/openeuler_repos/vars/main.yml").read_text())


def test_state_script_reads_facts_stats_and_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = tmp_path / "facts.d"
    facts.mkdir()
    (facts / "cann.fact").write_text(json.dumps({"toolkit": "9.1.0"}))
    (facts / "broken.fact").write_text("{not json")
    monkeypatch.setattr(STATE, "FACT_DIR", str(facts))
    profile = tmp_path / "ascend.sh"
    profile.write_text("x\n")
    profile.chmod(0o644)
    home = tmp_path / "Ascend" / "cann-9.1.0" / "x86_64-linux"
    home.mkdir(parents=True)
    (home / "ascend_toolkit_install.info").write_text("version=9.1.0\n")
    (home / "other.txt").write_text("")
    deep = tmp_path / "Ascend" / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "version.info").write_text("")  # depth 5: not found, as with find depth 4
    script = STATE.state_script(
        ["cann", "ascend", "broken"],
        [str(profile), str(tmp_path / "missing.sh"), str(facts)],
        {
            "path": str(tmp_path / "Ascend"),
            "names": ["ascend_toolkit_install.info", "version.info"],
            "depth": 4,
        },
    )
    out = subprocess.run(["sh", "-c", script, "state"], capture_output=True, text=True, check=True).stdout
    state = STATE.parse_state(out)
    assert state["local"] == {"cann": {"toolkit": "9.1.0"}, "broken": STATE.FACT_ERROR}
    stat = state["stats"][str(profile)]
    assert stat["mode"] == "0644" and stat["checksum"] == hashlib.sha1(b"x\n").hexdigest()
    assert str(tmp_path / "missing.sh") not in state["stats"]
    assert state["stats"][str(facts)]["checksum"] == "directory"
    assert state["files"] == [{"path": str(home / "ascend_toolkit_install.info")}]


def test_state_script_without_the_find_root_finds_nothing(tmp_path: Path) -> None:
    script = STATE.state_script(
        (), (), {"path": str(tmp_path / "none"), "names": ["version.info"], "depth": 4}
    )
    out = subprocess.run(["sh", "-c", script, "state"], capture_output=True, text=True, check=True).stdout
    assert STATE.parse_state(out) == {"local": {}, "stats": {}, "files": []}


def test_state_script_refuses_odd_fact_names() -> None:
    with pytest.raises(ValueError, match="local fact names"):
        STATE.state_script(["../../etc/passwd"])


def _repos_probe(mgr: str, *paths: str) -> str:
    script = REPOS_VARS["_openeuler_repos_probe"]
    return subprocess.run(["sh", "-c", script, "probe", mgr, *paths], capture_output=True, text=True).stdout


def test_repos_probe_runs_here_and_reports_its_files(tmp_path: Path) -> None:
    own = tmp_path / "provision.sources"
    own.write_text("Types: deb\n")
    own.chmod(0o644)
    out = _repos_probe("apt", str(own), str(tmp_path / "absent"))
    files = REPOS._sections(out)["files"]
    sha = hashlib.sha1(b"Types: deb\n").hexdigest()
    assert len(files) == 1 and files[0].startswith(f"{own} 644:") and files[0].endswith(f" {sha}")
    sections = REPOS._sections(out)
    assert "end" in sections and sections["packages"], "dpkg-query answered on this Debian machine"


def _section(label: str, *lines: str) -> str:
    return "\n".join([f"{REPOS.MARK}{label}", *lines]) + "\n"


def _dnf_probe(
    repo_sha: str = "aaa", excludes: tuple[str, ...] = ("exclude=kernel*",), end: bool = True
) -> str:
    return (
        _section("files", f"/etc/yum.repos.d/provision-openEuler.repo 644:root:root {repo_sha}")
        + _section("others", "/etc/yum.repos.d/provision-openEuler.repo")
        + _section("packages", "gcc gcc-12-1 gcc-12-1.x86_64", "make make-4-1 make-4-1.x86_64")
        + _section("dnf.conf exclude", *excludes)
        + (_section("end") if end else "")
    )


DNF: dict[str, Any] = {
    "pkg_mgr": "dnf",
    "files": {
        "/etc/yum.repos.d/provision-openEuler.repo": "aaa",
        "/etc/yum.repos.d/provision-cann.repo": None,
    },
    "own_sources": ["/etc/yum.repos.d/provision-openEuler.repo", "/etc/yum.repos.d/provision-cann.repo"],
    "disable_other_sources": True,
    "packages": ["gcc", "make-4-1"],
    "dnf_exclude": True,
    "dnf_exclude_line": "exclude=kernel*",
}


def test_repos_current_dnf_node_has_no_drift() -> None:
    assert REPOS.openeuler_repos_drift(_dnf_probe(), DNF) == []


@pytest.mark.parametrize(
    ("probe", "expected", "words"),
    [
        (_dnf_probe(repo_sha="bbb"), DNF, "provision-openEuler.repo differs"),
        (_dnf_probe(excludes=()), DNF, "lacks exclude=kernel*"),
        (_dnf_probe(excludes=("exclude=kernel*", "exclude=foo")), DNF, "lacks exclude=kernel*"),
        (_dnf_probe(), {**DNF, "dnf_exclude": False}, "still has exclude=kernel*"),
        (_dnf_probe(), {**DNF, "packages": ["gcc", "dkms"]}, "packages to install: dkms"),
        (_dnf_probe().replace("others\n", "others\n/etc/yum.repos.d/base.repo\n"), DNF, "base.repo"),
        (
            _dnf_probe(),
            {**DNF, "files": {**DNF["files"], "/etc/yum.repos.d/provision-cann.repo": "c"}},
            "missing",
        ),
        (_dnf_probe(end=False), DNF, "did not finish"),
    ],
)
def test_repos_drift_names_what_the_role_would_change(
    probe: str, expected: dict[str, Any], words: str
) -> None:
    drift = REPOS.openeuler_repos_drift(probe, expected)
    assert any(words in d for d in drift), drift


APT: dict[str, Any] = {
    "pkg_mgr": "apt",
    "files": {
        "/etc/apt/sources.list.d/provision-ubuntu.sources": "sss",
        "/etc/apt/keyrings/k.asc": "present",
    },
    "own_sources": ["/etc/apt/sources.list.d/provision-ubuntu.sources"],
    "disable_other_sources": True,
    "packages": ["gcc"],
    "hold": True,
    "hold_pattern": "^linux-(image|headers)-",
}


def _apt_probe(kernel: str = "hi", sources: tuple[str, ...] = (), mode: str = "644:root:root") -> str:
    return (
        _section(
            "files",
            "/etc/apt/sources.list.d/provision-ubuntu.sources 644:root:root sss",
            f"/etc/apt/keyrings/k.asc {mode} 123",
        )
        + _section("others", "/etc/apt/sources.list.d/provision-ubuntu.sources")
        + _section("packages", "gcc ii ", f"linux-image-6.1 {kernel} ", "linux-image-old rc ")
        + _section("sources.list", *sources)
        + _section("end")
    )


def test_repos_current_apt_node_has_no_drift() -> None:
    assert REPOS.openeuler_repos_drift(_apt_probe(), APT) == []


@pytest.mark.parametrize(
    ("probe", "expected", "words"),
    [
        (_apt_probe(kernel="ii"), APT, "selections to change: linux-image-6.1"),
        (_apt_probe(), {**APT, "hold": False}, "selections to change: linux-image-6.1"),
        (_apt_probe(sources=("deb http://x jammy main",)), APT, "sources.list has enabled entries"),
        (_apt_probe().replace(f"{REPOS.MARK}sources.list\n", ""), APT, "sources.list is missing"),
        (_apt_probe(mode="600:root:root"), APT, "mode/owner 600:root:root"),
        (_apt_probe(), {**APT, "packages": ["gcc", "dkms"]}, "packages to install: dkms"),
    ],
)
def test_repos_apt_drift(probe: str, expected: dict[str, Any], words: str) -> None:
    drift = REPOS.openeuler_repos_drift(probe, expected)
    assert any(words in d for d in drift), drift

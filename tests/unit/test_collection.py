"""The collection provision.ascend as Ansible tooling reads it: one ansible-core range, its Python
requirement where ansible-builder looks (meta/execution-environment.yml -> meta/ee-requirements.txt), and a
user's own copy of another version named, not silently passed over. (ansible-builder's build context and a
venv holding only ansible-core and these requirements: tests/integration/test_wheel.py.)"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from provision import paths
from provision.cli import _playbook
from provision.runner.run import RunResult, user_collections
from tests import helpers

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]


def project(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text())["project"]
    return data


def requirement(dependencies: list[str], name: str) -> Requirement:
    (found,) = [Requirement(spec) for spec in dependencies if Requirement(spec).name == name]
    return found


def test_one_ansible_core_range_everywhere() -> None:
    pyproject = requirement(project(ROOT / "pyproject.toml")["dependencies"], "ansible-core").specifier
    runtime = SpecifierSet(yaml.safe_load((ROOT / "meta/runtime.yml").read_text())["requires_ansible"])
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    image = Requirement(ee["dependencies"]["ansible_core"]["package_pip"])
    assert image.name == "ansible-core"
    assert runtime == pyproject == image.specifier, (runtime, pyproject, image.specifier)
    (floor,) = [spec.version for spec in pyproject if spec.operator == ">="]
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        assert yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"] == floor, meta


def test_the_python_requirement_is_where_ansible_builder_reads_it_and_pins_this_release() -> None:
    version = project(ROOT / "pyproject.toml")["version"]
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert galaxy["version"] == version
    meta = yaml.safe_load((ROOT / "meta/execution-environment.yml").read_text())
    listed = (ROOT / meta["dependencies"]["python"]).read_text().splitlines()
    assert [line for line in listed if line.strip() and not line.startswith("#")] == [f"provision=={version}"]
    # the collection artifact keeps them (ansible-builder cannot read what build_ignore drops)
    assert not {"meta", "meta/ee-requirements.txt", "meta/execution-environment.yml"} & set(
        galaxy["build_ignore"]
    )
    # the rig is made against this release of provision (it imports its internals)
    rig = requirement(project(ROOT / "provision-sim/pyproject.toml")["dependencies"], "provision")
    assert str(rig.specifier) == f"=={version}"
    # the execution environment installs the collection and the wheel of this release
    ee = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    files = {entry["src"] for entry in ee["additional_build_files"]}
    assert files == {
        f"dist/{galaxy['namespace']}-{galaxy['name']}-{version}.tar.gz",
        f"dist/provision-{version}-py3-none-any.whl",
    }


def installed_copy(folder: Path, version: str) -> Path:
    """``folder`` as a collections path holding provision.ascend ``version`` as ansible-galaxy installs it."""
    root = folder / "ansible_collections" / "provision" / "ascend"
    root.mkdir(parents=True)
    (root / "MANIFEST.json").write_text(
        json.dumps({"collection_info": {"namespace": "provision", "name": "ascend", "version": version}})
    )
    return root


def test_a_users_copy_of_another_version_is_named(tmp_path: Path) -> None:
    ours = paths.collection_version(paths.ansible_root())
    assert ours == project(ROOT / "pyproject.toml")["version"]
    other = installed_copy(tmp_path / "other", "9.9.9")
    same = installed_copy(tmp_path / "same", str(ours))
    search = os.pathsep.join([str(tmp_path / "empty"), str(tmp_path / "other"), str(tmp_path / "same")])
    assert paths.shadowed_collections(search) == [
        f"{other} holds provision.ascend 9.9.9; provision runs its own provision.ascend {ours}"
        f" ({paths.ansible_root().resolve()}), whose plugins match this provision package: ansible-playbook"
        " would use yours. To run 9.9.9 with provision, install the provision release of that version."
    ]
    assert same.is_dir() and paths.shadowed_collections(str(tmp_path / "same")) == []
    # provision's own collection on the user's path (the link of a checkout) is no other copy
    assert paths.shadowed_collections(str(paths.collections_path())) == []


def test_apply_warns_of_a_users_other_version_on_the_collections_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed_copy(tmp_path / "mine", "0.0.9")
    folder = tmp_path / "inventory"
    shutil.copytree(ROOT / "examples", folder)
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(tmp_path / "mine"))
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))
    assert user_collections() == str(tmp_path / "mine")

    def fake_run(playbook: str, inventory: Path, **kwargs: Any) -> RunResult:
        return RunResult(
            playbook=playbook, rc=0, status="successful", run_dir=tmp_path, seconds=0, check=True
        )

    monkeypatch.setattr(_playbook, "run_playbook", fake_run)
    code = helpers.run_cli(["plan", str(folder / "inventory.ini")], monkeypatch)
    err = capsys.readouterr().err
    assert code == 0, err
    assert (
        f"warning: {tmp_path}/mine/ansible_collections/provision/ascend holds provision.ascend 0.0.9;" in err
    )

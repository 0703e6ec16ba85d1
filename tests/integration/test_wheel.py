"""The wheel carries playbooks/roles/plugins/ansible.cfg and works outside a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
COLLECTION = "provision/_ansible/ansible_collections/provision/ascend"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        timeout=300,
    )
    (found,) = out.glob("provision-*.whl")
    return found


def test_wheel_contains_ansible_content(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        f"{COLLECTION}/galaxy.yml",
        f"{COLLECTION}/meta/runtime.yml",
        f"{COLLECTION}/ansible.cfg",
        f"{COLLECTION}/playbooks/site.yml",
        f"{COLLECTION}/roles/preflight/tasks/main.yml",
        f"{COLLECTION}/plugins/action/ascend_facts.py",
        f"{COLLECTION}/plugins/filter/vllm_serve.py",
        f"{COLLECTION}/examples/inventory.ini",
        "provision/data/versions.yml",
        "provision/scripts/ascend_probe.sh",
        "provision/scripts/record_observe.py",
        "provision/_image/Dockerfile",
    ):
        assert required in names, required


def test_the_product_wheel_holds_no_rig(wheel: Path) -> None:
    """A rack operator's controller gets the product only: no simulated cluster, hardware, vendor tools,
    mirror builder, CPU engine, image bench or CPU profile."""
    names = zipfile.ZipFile(wheel).namelist()
    rig = [n for n in names if n.startswith(("provision_sim/", "provision/sim/")) or "smollm2" in n]
    assert rig == []
    for gone in ("provision/serving/engine.py", "provision/image/testbed.py", "provision/cli/sim.py"):
        assert gone not in names


def test_the_rig_wheel_adds_the_sim_verb(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT / "provision-sim"),
        ],
        check=True,
        timeout=300,
    )
    (rig,) = tmp_path.glob("provision_sim-*.whl")
    archive = zipfile.ZipFile(rig)
    names = archive.namelist()
    assert "provision_sim/cli.py" in names and "provision_sim/serving/smollm2-cpu.yml" in names
    assert not any(n.startswith("provision/") for n in names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points).decode()
    assert "[provision.verbs]\nsim = provision_sim.cli:register" in text


def test_installed_wheel_runs_a_playbook_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "inventory.ini").write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        "[npu_nodes:vars]\npreflight_require_npus=false\npreflight_allow_unsupported_os=true\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "PROVISION_RUNS_DIR": str(tmp_path / "runs"), "CI": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import provision.paths as p; print(p.ansible_root())"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == str(site / COLLECTION)
    done = subprocess.run(
        [sys.executable, "-m", "provision", "apply", "--check", "-p", "preflight", "inventory.ini"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| localhost |" in done.stdout and "| ok" in done.stdout


def test_the_collection_installs_with_ansible_galaxy_and_runs_by_its_fqcn(tmp_path: Path) -> None:
    """Plain Ansible users install the repository as the collection provision.ascend and run its playbooks
    by name; its plugins need only the provision package beside ansible-core."""
    bin_dir = Path(sys.executable).parent
    collections = tmp_path / "collections"
    installed = subprocess.run(
        [
            str(bin_dir / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(collections),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    root = collections / "ansible_collections" / "provision" / "ascend"
    assert (root / "roles" / "vllm_serve" / "tasks" / "main.yml").is_file()
    assert (root / "plugins" / "filter" / "vllm_serve.py").is_file()
    assert not (root / "provision").exists() and not (root / "tests").exists()  # build_ignore
    (tmp_path / "inventory.ini").write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        "[npu_nodes:vars]\npreflight_require_npus=false\npreflight_allow_unsupported_os=true\n"
    )
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_CONFIG", None)
    done = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "inventory.ini", "--check", "provision.ascend.preflight"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "localhost                  : ok=" in done.stdout and "failed=0" in done.stdout

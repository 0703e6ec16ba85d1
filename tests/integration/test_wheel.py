"""The wheel carries playbooks/roles/plugins/ansible.cfg and works outside a checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

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


def collection_tarball(folder: Path) -> Path:
    """The collection as users get it (``ansible-galaxy collection build``) in ``folder``."""
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [str(bin_dir / "ansible-galaxy"), "collection", "build", "--output-path", str(folder), str(ROOT)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    (found,) = folder.glob("provision-ascend-*.tar.gz")
    return found


def test_ansible_builder_makes_the_execution_environments_build_context(wheel: Path, tmp_path: Path) -> None:
    """The shipped execution-environment.yml, beside the dist/ that `make ee-context` fills (the collection
    and provision's wheel): ansible-builder accepts it and writes a build context that installs both; its
    introspection of the installed collection finds the Python requirement (meta/ee-requirements.txt)."""
    bin_dir = Path(sys.executable).parent
    dist = tmp_path / "dist"
    dist.mkdir()
    tarball = collection_tarball(dist)
    (dist / wheel.name).write_bytes(wheel.read_bytes())
    shutil.copy(ROOT / "execution-environment.yml", tmp_path)
    created = subprocess.run(
        [str(bin_dir / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", "context"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    context = tmp_path / "context"
    assert sorted(p.name for p in (context / "_build" / "dist").iterdir()) == sorted(
        [tarball.name, wheel.name]
    )
    containerfile = (context / "Dockerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.19.14,<2.22 ansible-runner>=2.4"' in containerfile
    assert containerfile.count("COPY _build/dist/ /build/dist/") == 1  # the builder stage's pip
    assert yaml.safe_load((context / "_build" / "requirements.yml").read_text()) == {
        "collections": [{"name": f"/build/dist/{tarball.name}", "type": "file"}]
    }
    assert (context / "_build" / "requirements.txt").read_text().strip() == (
        f"provision @ file:///build/dist/{wheel.name}"
    )
    # what the image's builder stage reads from the installed collection
    collections = tmp_path / "collections"
    subprocess.run(
        [str(bin_dir / "ansible-galaxy"), "collection", "install", "-p", str(collections), str(tarball)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    introspect = subprocess.run(
        [str(bin_dir / "ansible-builder"), "introspect", str(collections)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "provision==0.1.0  # from collection provision.ascend" in introspect.stdout, introspect.stdout


def test_a_venv_with_ansible_core_and_the_declared_requirements_runs_the_collection(
    wheel: Path, tmp_path: Path
) -> None:
    """A fresh venv holding ansible-core and the collection's declared requirements only (meta/ee-requirements
    .txt, resolved from the release's wheel): every action and filter plugin of provision.ascend loads, and
    `ansible-playbook -i INV provision.ascend.site --check` on this machine runs preflight's probes and stops
    at its first real check (no NPU here), not at an import. Measured: 62 s (pip's cache warm, 2 shared
    cores)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    core = next(
        spec
        for spec in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if spec.startswith("ansible-core")
    )
    installed = subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "-q",
            "--find-links",
            str(wheel.parent),
            core,
            "-r",
            str(ROOT / "meta" / "ee-requirements.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    collections = tmp_path / "collections"
    subprocess.run(
        [
            str(venv / "bin" / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(collections),
            str(ROOT),
        ],
        capture_output=True,
        check=True,
        timeout=300,
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))},
        "ANSIBLE_COLLECTIONS_PATH": str(collections),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
    }
    actions = sorted(p.stem for p in (ROOT / "plugins" / "action").glob("*.py"))
    filters = sorted(p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml"))
    loaded = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            LOAD_PLUGINS,
            str(collections),
            ",".join(actions),
            ",".join(filters),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout.splitlines()[-1]) == {"loaded": len(actions) + len(filters), "failed": {}}

    python = venv / "bin" / "python"
    (tmp_path / "inventory.ini").write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={python}\n"
        "[npu_nodes:vars]\npreflight_allow_unsupported_os=true\n"
    )
    done = subprocess.run(
        [
            str(venv / "bin" / "ansible-playbook"),
            "-i",
            "inventory.ini",
            "provision.ascend.site",
            "--check",
            "-e",
            '{"preflight_min_free_mb": {}}',
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "No module named" not in output and "error occurred while loading" not in output, output
    assert done.returncode == 2, output  # a failed host, as ansible-playbook reports it
    assert "TASK [provision.ascend.preflight : Probe NPUs, drivers and disk space]" in output
    assert "Expected 8 Ascend NPUs (PCI 19e5:*), found 0" in output, output


# Loads every action and filter plugin of provision.ascend through Ansible's own plugin loader (as a play
# does), in the venv under test: argv = collections path, action names, filter names.
LOAD_PLUGINS = """
import json, sys
from ansible.plugins.loader import action_loader, filter_loader, init_plugin_loader
init_plugin_loader([sys.argv[1]])
failed, loaded = {}, 0
for kind, names in (("action", sys.argv[2]), ("filter", sys.argv[3])):
    for name in names.split(","):
        try:
            if kind == "action":
                found = action_loader.get_with_context(f"provision.ascend.{name}", class_only=True).object
            else:
                found = filter_loader.get(f"provision.ascend.{name}")
        except Exception as exc:
            found, failed[f"{kind} {name}"] = None, repr(exc)
        if found is None:
            failed.setdefault(f"{kind} {name}", "not found")
        else:
            loaded += 1
print(json.dumps({"loaded": loaded, "failed": failed}))
"""

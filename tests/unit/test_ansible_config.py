"""The user's Ansible configuration wins over provision's: provision's ansible.cfg settings are defaults, host
key checking is the one setting provision refuses to run without, and `provision config` says where each
setting of a run comes from."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from provision import paths
from provision.ansible_config import config_env, user_collections_path
from provision.errors import EnvironmentProblem, InputError
from provision.inventory.load import load_inventory
from provision.runner.run import ansible_env
from tests.helpers import run_cli

pytestmark = pytest.mark.unit


@pytest.fixture
def somewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory outside the checkout, a HOME without ~/.ansible.cfg, no ANSIBLE_* variable."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    for name in [n for n in os.environ if n.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    return work


def write_cfg(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_without_a_config_of_the_user_a_run_reads_provisions(somewhere: Path) -> None:
    assert config_env() == {"ANSIBLE_CONFIG": str(paths.ansible_cfg())}
    assert ansible_env()["ANSIBLE_HOST_KEY_CHECKING"] == "True"


def test_the_users_ansible_cfg_wins_and_provision_fills_the_rest(somewhere: Path) -> None:
    cfg = write_cfg(
        somewhere / "ansible.cfg",
        """\
        [defaults]
        remote_user = deployer
        forks = 5
        collections_path = /opt/their/collections
        [ssh_connection]
        pipelining = False
        """,
    )
    env = config_env()
    assert env["ANSIBLE_CONFIG"] == str(cfg.resolve())
    # What they set is theirs: no variable of provision's overrides it.
    assert "ANSIBLE_FORKS" not in env
    assert not {"ANSIBLE_PIPELINING", "ANSIBLE_SSH_PIPELINING"} & env.keys()
    # What they leave unset comes from provision's ansible.cfg, as that setting's variable.
    assert env["ANSIBLE_GATHERING"] == "smart"
    assert env["ANSIBLE_SSH_ARGS"].startswith("-o ControlMaster=auto")
    assert env["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] == "True"
    # Their collections come after provision's collection.
    assert user_collections_path() == "/opt/their/collections"
    assert ansible_env()["ANSIBLE_COLLECTIONS_PATH"].endswith(":/opt/their/collections")


def test_an_ansible_variable_of_the_user_wins_over_provisions_default(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = write_cfg(somewhere / "mine.cfg", "[defaults]\nremote_user = deployer\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    monkeypatch.setenv("ANSIBLE_GATHERING", "explicit")
    env = config_env()
    assert env["ANSIBLE_CONFIG"] == str(cfg.resolve())
    assert "ANSIBLE_GATHERING" not in env  # the run keeps the user's explicit, from their environment
    assert env["ANSIBLE_FORKS"] == "50"


def test_ansible_config_naming_provisions_own_file_is_provisions(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSIBLE_CONFIG", str(paths.ansible_cfg()))
    assert config_env() == {"ANSIBLE_CONFIG": str(paths.ansible_cfg())}


def test_a_config_turning_host_key_checking_off_is_refused(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_cfg(somewhere / "ansible.cfg", "[defaults]\nhost_key_checking = False\n")
    with pytest.raises(EnvironmentProblem):
        config_env()
    assert run_cli(["config"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert f"{cfg.resolve()}: [defaults] host_key_checking = False: provision runs with host key" in err
    assert "Traceback" not in err


def test_an_environment_turning_host_key_checking_off_is_refused(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "no")
    assert run_cli(["config"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "ANSIBLE_HOST_KEY_CHECKING=no: provision runs with host key checking on" in err
    assert err.rstrip().endswith("; unset it")


def test_provision_config_says_where_each_setting_comes_from(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_cfg(somewhere / "ansible.cfg", "[defaults]\nremote_user = deployer\nforks = 5\n")
    assert run_cli(["config"], monkeypatch) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert lines["DEFAULT_REMOTE_USER"].endswith(f"deployer  [{cfg.resolve()}]")
    assert lines["DEFAULT_FORKS"].endswith(f"5  [{cfg.resolve()}]")
    assert lines["DEFAULT_GATHERING"].endswith("smart  [provision (ANSIBLE_GATHERING)]")
    assert lines["HOST_KEY_CHECKING"].endswith("True  [provision (ANSIBLE_HOST_KEY_CHECKING)]")


def test_the_strategy_of_the_users_ansible_cfg_is_kept(somewhere: Path) -> None:
    from provision.runner.run import strategy_settings

    assert strategy_settings({})["ANSIBLE_STRATEGY"] == "mitogen_linear"  # provision's choice (a dependency)
    write_cfg(somewhere / "ansible.cfg", "[defaults]\nstrategy = free\n")
    assert strategy_settings({}) == {}  # theirs: ansible-playbook reads it from their file
    assert strategy_settings({"PROVISION_STRATEGY": "linear"}) == {"ANSIBLE_STRATEGY": "linear"}


def test_loading_an_inventory_sets_no_ansible_variable_in_the_process(somewhere: Path) -> None:
    # A variable set at import would reach everything the process runs and beat the user's ansible.cfg.
    code = (
        "import os, sys; from provision.inventory.load import load_inventory; "
        "load_inventory(sys.argv[1]); print(sorted(n for n in os.environ if n.startswith('ANSIBLE_')))"
    )
    inventory = somewhere / "hosts.ini"
    inventory.write_text("[npu_nodes]\nnode1 ansible_host=10.0.0.1\n")
    done = subprocess.run(
        [sys.executable, "-c", code, str(inventory)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_a_config_of_the_user_a_broken_source_is_an_error(somewhere: Path) -> None:
    # Ansible alone warns and reads an empty inventory; provision's [inventory] settings make it an error.
    broken = somewhere / "hosts.yml"
    broken.write_text("all:\n  hosts: [node1\n")
    done = subprocess.run(
        [sys.executable, "-m", "provision", "validate", str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{broken}: not a valid Ansible inventory" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_users_inventory_plugins_win_over_provisions(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ansible import constants

    write_cfg(somewhere / "ansible.cfg", "[inventory]\nenable_plugins = ini\n")
    # What Ansible read from their file at start (this process started elsewhere).
    monkeypatch.setattr(constants, "INVENTORY_ENABLED", ["ini"])
    inventory = somewhere / "hosts.yml"
    inventory.write_text("all:\n  children:\n    npu_nodes:\n      hosts:\n        node1: {}\n")
    with pytest.raises(InputError, match="not a valid Ansible inventory"):
        load_inventory(inventory)  # their plugins: no yaml
    assert constants.INVENTORY_ENABLED == ["ini"]
    (somewhere / "ansible.cfg").unlink()
    monkeypatch.setattr(constants, "INVENTORY_ENABLED", ["ini"])
    assert load_inventory(inventory).group_hosts("npu_nodes") == ["node1"]  # provision's, for that load
    assert constants.INVENTORY_ENABLED == ["ini"], "put back after the load"


def test_ansible_runs_and_provision_print_no_import_noise_and_keep_the_users_filters(
    somewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONWARNINGS", "error::ResourceWarning")
    env = ansible_env()
    assert env["PYTHONWARNINGS"].startswith("error::ResourceWarning,ignore:DSA is deprecated:")
    bin_dir = Path(sys.executable).parent
    run = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "--version"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Warning" not in run.stderr, run.stderr
    # provision's own process: Ansible's import is quiet, a DSA name the user's code touches still warns.
    script = (
        "import warnings; warnings.simplefilter('always')\n"
        "from provision.ansible_config import quiet_import_noise; quiet_import_noise()\n"
        "import ansible._internal._ssh._ssh_agent\n"
        "from cryptography.hazmat.primitives.asymmetric import dsa\n"
        "import cryptography; print(cryptography.__version__)\n"
        "dsa.DSAPrivateKey\n"
    )
    own = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "_ssh_agent" not in own.stderr, own.stderr
    if int(own.stdout.split(".")[0]) >= 51:  # DSA is deprecated from cryptography 51 on
        assert "DSA is deprecated" in own.stderr

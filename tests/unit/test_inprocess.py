"""When a run may go in provision's process, and when it must go through ansible-playbook
(provision/runner/inprocess.py; tests/integration/test_inprocess.py runs both for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.inventory.load import Inventory
from provision.runner.inprocess import refusal
from provision.runner.options import AnsibleOptions

pytestmark = pytest.mark.unit


def read(**host_vars: object) -> Inventory:
    """An inventory as load_inventory leaves it: Ansible's manager and loader beside the variables."""
    return Inventory(Path("inv.ini"), hosts={"node1": dict(host_vars)}, manager=object(), loader=object())


@pytest.mark.parametrize(
    ("inventory", "kwargs", "why"),
    [
        (None, {}, "the inventory was not read in this process"),
        (Inventory(Path("inv.ini"), hosts={"node1": {}}), {}, "the inventory was not read in this process"),
        (read(), {"verbosity": 1}, "-v: ansible-playbook's own output"),
        (read(), {"options": AnsibleOptions(user="admin")}, "command-line Ansible options"),
        (read(), {"options": AnsibleOptions(become=True)}, "command-line Ansible options"),
        (read(), {"options": AnsibleOptions(ask_become_pass=True)}, "command-line Ansible options"),
        (read(), {"extra_vars": ["@f.json", "a=b"]}, "extra variables other than @file"),
        (read(ansible_connection="community.docker.docker"), {}, "connection community.docker.docker"),
        (read(ansible_connection="mitogen_ssh"), {}, "connection mitogen_ssh"),
    ],
)
def test_what_goes_through_ansible_playbook(
    inventory: Inventory | None, kwargs: dict[str, object], why: str
) -> None:
    assert refusal(inventory, **kwargs) == why  # type: ignore[arg-type]


def test_a_plain_ssh_inventory_may_run_here_when_ansible_reads_the_runs_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ansible import constants

    monkeypatch.setattr("provision.runner.inprocess.ansible_env", lambda: {"ANSIBLE_CONFIG": str(tmp_path)})
    assert refusal(read(ansible_connection="ssh"), extra_vars=["@f.json"]) == (
        f"Ansible in this process read {constants.config._config_file or 'no config file'}, "
        f"the run reads {tmp_path}"
    )
    chosen = constants.config._config_file or str(tmp_path / "none.cfg")
    monkeypatch.setattr(constants.config, "_config_file", chosen)
    monkeypatch.setattr("provision.runner.inprocess._executor_known", lambda: True)
    monkeypatch.setattr("provision.runner.inprocess.ansible_env", lambda: {"ANSIBLE_CONFIG": chosen})
    assert refusal(read(ansible_connection="ssh"), extra_vars=["@f.json"]) is None
    assert refusal(read(), options=AnsibleOptions()) is None
    monkeypatch.setattr(constants, "TASK_TIMEOUT", 30)
    assert refusal(read()) == (
        "task_timeout is set (Ansible times tasks out with a signal, in its main thread)"
    )


def test_an_executor_it_does_not_drive_goes_through_ansible_playbook(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible import constants
    from ansible.release import __version__

    monkeypatch.setattr(constants.config, "_config_file", "/x/ansible.cfg")
    monkeypatch.setattr(
        "provision.runner.inprocess.ansible_env", lambda: {"ANSIBLE_CONFIG": "/x/ansible.cfg"}
    )
    monkeypatch.setattr("provision.runner.inprocess._executor_known", lambda: False)
    assert refusal(read()) == (
        f"ansible-core {__version__}: a task executor this runner does not drive (it drives 2.19's)"
    )


def test_this_ansible_cores_executor_is_known_or_refused() -> None:
    """2.19 (Python 3.11, `make test`) is driven in process; 2.21 (the py312 variant) is refused."""
    from ansible.release import __version__

    from provision.runner.inprocess import _executor_known

    assert _executor_known() is __version__.startswith("2.19.")

"""Which Ansible strategy `provision apply/plan` asks for (provision.runner.run.strategy_settings)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from provision.errors import EnvironmentProblem
from provision.runner import run

pytestmark = pytest.mark.unit


def test_mitogen_linear_when_mitogen_is_installed() -> None:
    if importlib.util.find_spec("ansible_mitogen") is None:
        pytest.skip("mitogen is not installed here")
    settings = run.strategy_settings({})
    assert settings["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(settings["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()
    assert settings["ANSIBLE_TIMEOUT"] == run.MITOGEN_CONNECT_TIMEOUT
    assert "ANSIBLE_TIMEOUT" not in run.strategy_settings({"ANSIBLE_TIMEOUT": "5"})


def test_without_mitogen_ansible_keeps_its_own_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run.importlib.util, "find_spec", lambda name: None)
    assert run.strategy_settings({}) == {}


def test_asking_for_mitogen_without_it_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EnvironmentProblem, match="pip install mitogen"):
        run.strategy_settings({"PROVISION_STRATEGY": "mitogen_free"})


def test_user_choices_win() -> None:
    assert run.strategy_settings({"PROVISION_STRATEGY": "linear"}) == {"ANSIBLE_STRATEGY": "linear"}
    assert run.strategy_settings({"ANSIBLE_STRATEGY": "free"}) == {}

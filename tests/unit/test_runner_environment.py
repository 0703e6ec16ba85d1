"""The allow-list of the environment an Ansible run gets (provision.runner.environment), name by name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from provision.errors import EnvironmentProblem
from provision.runner.environment import ANSIBLE_SECRETS, confine, refuse_secrets, run_environment

pytestmark = pytest.mark.unit

KEPT = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/ops",
    "USER": "ops",
    "LOGNAME": "ops",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "xterm",
    "TMPDIR": "/tmp",
    "TZ": "UTC",
    "SSH_AUTH_SOCK": "/run/user/1000/ssh-agent.sock",
    "XDG_STATE_HOME": "/home/ops/.local/state",
    "ANSIBLE_CONFIG": "/etc/ansible/ansible.cfg",
    "ANSIBLE_VAULT_PASSWORD_FILE": "/home/ops/.vault-pass",  # a path to a secret, not one
    "ANSIBLE_BECOME_PASSWORD_FILE": "/home/ops/.become-pass",
    "ANSIBLE_ASK_PASS": "False",  # a yes/no setting
    "ANSIBLE_DUPLICATE_YAML_DICT_KEY": "error",
    "MITOGEN_POOL_SIZE": "16",
    "PROVISION_STRATEGY": "linear",
    "PROVISION_RUNS_DIR": "/srv/runs",
    "PROVISION_REGISTRY_PASSWORD_FILE": "/home/ops/.registry",
    "http_proxy": "http://proxy.example:3128",
    "HTTPS_PROXY": "proxy.example:3128",
    "no_proxy": "localhost,10.0.0.0/8",
}
DROPPED = {
    "MY_DB_PASSWORD": "planted-1",
    "AWS_SECRET_ACCESS_KEY": "planted-2",
    "GITHUB_TOKEN": "planted-3",
    "HF_TOKEN": "hf_planted",
    "OPENAI_API_KEY": "sk-planted",
    "VLLM_API_KEY": "planted-4",
    "DOCKER_AUTH_CONFIG": '{"auths": {}}',
    "SSH_CONNECTION": "10.0.0.1 5000 10.0.0.2 22",  # not needed, says who connects from where
    "PROVISION_API_KEY": "planted-5",
    "PROVISION_REGISTRY_PASSWORD": "planted-6",
    "ANSIBLE_VAULT_PASSWORD": "planted-7",  # not an Ansible variable, but says what it holds
    "ANSIBLE_BECOME_PASS": "planted-8",
    "ANSIBLE_PRIVATE_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----",
    "XDG_SESSION_TOKEN": "planted-9",
    "https_proxy": "http://ops:planted-10@proxy.example:3128",
    "ALL_PROXY": "socks5://ops:planted-11@proxy.example:1080",
    "FTP_PROXY": "http://ops@proxy.example:3128",
}


def test_the_allow_list_keeps_what_a_run_needs_and_nothing_else() -> None:
    assert run_environment({**KEPT, **DROPPED}) == KEPT


@pytest.mark.parametrize("name", sorted(ANSIBLE_SECRETS))
def test_a_secret_ansible_reads_is_refused_naming_what_passes_it_instead(name: str) -> None:
    with pytest.raises(EnvironmentProblem) as refused:
        refuse_secrets({"PATH": "/bin", name: "planted"})
    message = str(refused.value)
    assert message.startswith(f"{name} set in the environment: ansible-runner would write it")
    assert f"{name}: give {ANSIBLE_SECRETS[name]} instead" in message
    assert "planted" not in message
    assert refused.value.exit_code == 2


def test_no_secret_ansible_reads_no_refusal() -> None:
    refuse_secrets({**KEPT, **{k: v for k, v in DROPPED.items() if k not in ANSIBLE_SECRETS}})
    refuse_secrets({"ANSIBLE_BECOME_PASS": ""})  # set empty: nothing to write down


def test_confine_removes_what_ansible_runner_copied_and_keeps_what_it_or_provision_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {**KEPT, **DROPPED}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWX_ISOLATED_DATA_DIR", "planted-but-overwritten")
    given = {"PATH": "/venv/bin:/usr/bin", "ANSIBLE_NOCOLOR": "1", "PYTHONUNBUFFERED": "1"}
    # what ansible-runner's RunnerConfig.prepare() builds: os.environ, then envvars, then its own settings
    env = {**KEPT, **DROPPED, "AWX_ISOLATED_DATA_DIR": "/runs/x/artifacts/1", **given}
    env["ANSIBLE_STDOUT_CALLBACK"] = "awx_display"
    config = SimpleNamespace(env=env)
    handler = confine(given)
    handler({"status": "running"}, runner_config=config)
    assert set(DROPPED) <= set(config.env), "only the status that comes before the command file counts"
    handler({"status": "starting", "runner_ident": "1"}, runner_config=config)
    assert config.env == {
        **KEPT,
        **given,
        "AWX_ISOLATED_DATA_DIR": "/runs/x/artifacts/1",
        "ANSIBLE_STDOUT_CALLBACK": "awx_display",
    }

"""Which of the controller's environment variables an Ansible run started by provision sees.

ansible-runner starts ansible-playbook with a copy of the whole process environment and writes that copy,
value by value, into the run directory (``artifacts/<ident>/command``), which provision keeps. So the run gets
an allow-list, decided here and nowhere else:

- what a program needs to run at all: ``PATH``, ``HOME``, ``USER``/``LOGNAME``, ``LANG``/``LANGUAGE``/
  ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR``, ``XDG_*``, ``PYTHONPATH`` (the plugins import ``provision``);
- what ssh authenticates with, by reference and never by value: ``SSH_AUTH_SOCK`` (the agent's socket),
  ``KRB5CCNAME`` (the Kerberos ticket cache's path);
- ``ANSIBLE_*`` (Ansible's and ansible-runner's settings), ``MITOGEN_*`` (the strategy's), ``PROVISION_*``
  (provision's own, some read by the plugins);
- the proxy variables (``http_proxy``, ``https_proxy``, ``no_proxy`` ..., either case) when their URL carries
  no user or password;

and within those, a name that says it holds a secret (``..._PASSWORD``, ``..._TOKEN``, ``..._API_KEY``,
``ANSIBLE_VAULT_PASSWORD`` ...) is dropped: ``PROVISION_API_KEY`` and ``PROVISION_REGISTRY_PASSWORD`` are
read by provision itself, never by Ansible. The few secret-valued variables Ansible does read (the become
password, a private key given by value) are refused before anything runs, naming the option that passes the
same secret without writing it down (:func:`refuse_secrets`).

A consequence: ``lookup('env', NAME)`` in an inventory sees only these variables under provision; a secret
for an inventory belongs in ansible-vault (or a ``file`` lookup of a file only its owner reads).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from provision.errors import EnvironmentProblem

PASSED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TERM",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "SSH_AUTH_SOCK",
        "KRB5CCNAME",
    }
)
PASSED_PREFIXES = ("LC_", "XDG_", "ANSIBLE_", "MITOGEN_", "PROVISION_")
PROXIES = frozenset(
    name
    for base in ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy")
    for name in (base, base.upper())
)

# A name that says its value is a secret. A path to a secret (``..._FILE``, ``..._PATH``) or a yes/no
# setting (``ANSIBLE_ASK_PASS``) is not one.
SECRET_NAME = re.compile(
    r"(?:^|_)(?:PASS|PASSWD|PASSWORD|PASSPHRASE|TOKEN|SECRET|CREDENTIALS?|API_?KEY|PRIVATE_KEY)$", re.I
)
NOT_SECRET = frozenset({"ANSIBLE_ASK_PASS", "ANSIBLE_BECOME_ASK_PASS", "ANSIBLE_ASK_VAULT_PASS"})

# The secret-valued variables Ansible itself reads (ansible-core's plugin documentation: the sudo, su and
# runas become plugins, the ssh connection plugin), and what gives Ansible the same secret through a file.
ANSIBLE_SECRETS: Mapping[str, str] = {
    "ANSIBLE_BECOME_PASS": "-K (--ask-become-pass) or --become-password-file FILE",
    "ANSIBLE_SUDO_PASS": "-K (--ask-become-pass) or --become-password-file FILE",
    "ANSIBLE_SU_PASS": "-K (--ask-become-pass) or --become-password-file FILE",
    "ANSIBLE_RUNAS_PASS": "-K (--ask-become-pass) or --become-password-file FILE",
    "ANSIBLE_PRIVATE_KEY": "--private-key FILE, or the key in ssh-agent (SSH_AUTH_SOCK is passed on)",
    "ANSIBLE_PRIVATE_KEY_PASSPHRASE": "the key in ssh-agent (SSH_AUTH_SOCK is passed on)",
}


def is_secret_name(name: str) -> bool:
    return name not in NOT_SECRET and bool(SECRET_NAME.search(name))


def passed(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` of the controller reaches an Ansible run."""
    if name in PROXIES:
        return not _has_credentials(value)
    if name not in PASSED and not name.startswith(PASSED_PREFIXES):
        return False
    return not is_secret_name(name)


def _has_credentials(url: str) -> bool:
    """A proxy URL with a user (and password) in it: ``http://user:pass@proxy:3128``."""
    host = url.split("://", 1)[-1].split("/", 1)[0]
    return "@" in host


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` an Ansible run gets."""
    return {name: value for name, value in environ.items() if passed(name, value)}


def refuse_secrets(environ: Mapping[str, str] | None = None) -> None:
    """EnvironmentProblem (exit 2, nothing run) when ``environ`` sets a secret-valued variable that Ansible
    reads: dropping it would change what the run does, passing it would write the secret into the run
    directory."""
    environ = os.environ if environ is None else environ
    found = [name for name in ANSIBLE_SECRETS if environ.get(name)]
    if found:
        lines = [f"{name}: give {ANSIBLE_SECRETS[name]} instead" for name in found]
        raise EnvironmentProblem(
            f"{', '.join(found)} set in the environment: ansible-runner would write it into the run "
            "directory (artifacts/*/command), so provision does not pass it on; unset it and\n  "
            + "\n  ".join(lines)
        )


StatusHandler = Callable[..., None]


def confine(given: Mapping[str, str]) -> StatusHandler:
    """An ansible-runner ``status_handler`` that confines the run's environment to the allow-list.

    ansible-runner always starts from a copy of ``os.environ`` (it has no option to start from less) and
    reports the status ``starting`` with its configuration before it writes ``artifacts/<ident>/command``
    and before it starts ansible-playbook; removing there what it copied from this process and the list
    does not pass is what confines both. What ``given`` sets (provision's own settings of the run) and what
    ansible-runner adds itself (its callback plugin, the artifact folder) stay.
    """

    def handle(status: Mapping[str, Any], runner_config: Any = None) -> None:
        if status.get("status") != "starting" or runner_config is None:
            return
        env: dict[str, str] = runner_config.env
        inherited = [
            name
            for name, value in env.items()
            if name not in given and os.environ.get(name) == value and not passed(name, value)
        ]
        for name in inherited:
            del env[name]

    return handle

"""Where the Ansible content (playbooks, roles, plugins, ansible.cfg) lives.

From a git checkout it is the repository root; from an installed wheel it is ``provision/_ansible``
(see ``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def ansible_root() -> Path:
    """The folder holding ``playbooks/``, ``roles/``, ``plugins/`` and ``ansible.cfg``."""
    bundled = _PACKAGE_DIR / "_ansible"
    if (bundled / "playbooks").is_dir():
        return bundled
    return _PACKAGE_DIR.parent


def playbook(name: str) -> Path:
    """Absolute path of ``playbooks/<name>`` (``.yml`` added when missing)."""
    if not name.endswith((".yml", ".yaml")):
        name = f"{name}.yml"
    return ansible_root() / "playbooks" / name


def ansible_cfg() -> Path:
    return ansible_root() / "ansible.cfg"


def data_dir() -> Path:
    """Package data: version lock, serving profiles."""
    return _PACKAGE_DIR / "data"

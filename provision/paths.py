"""Where the Ansible content lives: the collection ``provision.ascend`` (playbooks, roles, plugins).

From a git checkout the repository root is the collection's root (``galaxy.yml`` beside ``pyproject.toml``);
from an installed wheel it is ``provision/_ansible/ansible_collections/provision/ascend`` (see
``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml). Ansible finds a collection only below
``ansible_collections/<namespace>/<name>/`` of a collections path: :func:`collections_path` gives one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import yaml

_PACKAGE_DIR = Path(__file__).resolve().parent
NAMESPACE, NAME = "provision", "ascend"
COLLECTION = f"{NAMESPACE}.{NAME}"
"""The collection's name: every role, module and filter of it is ``provision.ascend.<name>``."""
_BUNDLED = _PACKAGE_DIR / "_ansible"

# On the nodes: read by the converged record (provision.converge) and by doctor's probe.
RECORD_PATH = "/var/lib/provision/converged.json"
"""What the last converged apply left on a node (its fingerprint and observation)."""
LINKS_PATH = "/var/lib/provision/fabric-links.json"
"""What the HCCN gate's bandwidth check last measured on a serving group's head (role hccn_gate's
``hccn_gate_links_record``): the threshold and each NPU pair's figures; doctor shows it."""
FACT_DIR = "/etc/ansible/facts.d"
"""The nodes' local facts (``*.fact``), as Ansible's setup module reads them."""


def ansible_root() -> Path:
    """The collection's root: ``playbooks/``, ``roles/``, ``plugins/``, ``galaxy.yml``, ``ansible.cfg``."""
    bundled = _BUNDLED / "ansible_collections" / NAMESPACE / NAME
    if (bundled / "playbooks").is_dir():
        return bundled
    return _PACKAGE_DIR.parent


def collections_path() -> Path:
    """A folder holding ``ansible_collections/provision/ascend`` = :func:`ansible_root`, for
    ``ANSIBLE_COLLECTIONS_PATH``. The wheel's copy is laid out so already; a checkout gets a link to itself
    under the user's cache, one per checkout (CI's clean clone and a developer's tree never share one)."""
    root = ansible_root()
    if root.parent.name == NAMESPACE and root.parent.parent.name == "ansible_collections":
        return root.parents[2]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "provision" / "collections"
    base = cache / hashlib.sha256(str(root).encode()).hexdigest()[:12]
    link = base / "ansible_collections" / NAMESPACE / NAME
    if not (link.is_symlink() and link.resolve() == root):
        link.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        with contextlib.suppress(FileExistsError):  # another run made it meanwhile
            link.symlink_to(root, target_is_directory=True)
    return base


def collection_version(root: Path) -> str | None:
    """The version of the collection at ``root``: an installed one's ``MANIFEST.json`` (ansible-galaxy), a
    source tree's or the wheel's ``galaxy.yml``; None when neither says."""
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError, KeyError):
        manifest = json.loads((root / "MANIFEST.json").read_text(encoding="utf-8"))
        return str(manifest["collection_info"]["version"])
    with contextlib.suppress(OSError, yaml.YAMLError, AttributeError, TypeError, KeyError):
        return str(yaml.safe_load((root / "galaxy.yml").read_text(encoding="utf-8"))["version"])
    return None


def shadowed_collections(search_path: str) -> list[str]:
    """A warning for each ``provision.ascend`` of another version on ``search_path`` (a collections path as
    ``ANSIBLE_COLLECTIONS_PATH`` spells it). provision's runs put their own collection first (its plugins use
    this provision package's parsers: meta/ee-requirements.txt pins the two to one release), so such a copy
    is not what they run, though a plain ansible-playbook would run it."""
    ours = ansible_root().resolve()
    version = collection_version(ours)
    warnings = []
    for entry in filter(None, search_path.split(os.pathsep)):
        base = Path(entry).expanduser()
        top = base if base.name == "ansible_collections" else base / "ansible_collections"
        theirs = top / NAMESPACE / NAME
        if not theirs.is_dir() or theirs.resolve() == ours:
            continue
        found = collection_version(theirs)
        if found != version:
            warnings.append(
                f"{theirs} holds {COLLECTION} {found or '(no version)'}; provision runs its own {COLLECTION} "
                f"{version} ({ours}), whose plugins match this provision package: ansible-playbook would use "
                f"yours. To run {found or 'that copy'} with provision, install the provision release of that "
                "version."
            )
    return warnings


def playbooks_dir() -> Path:
    """The collection's ``playbooks/``, where ansible-playbook reads playbook-adjacent group_vars."""
    return ansible_root() / "playbooks"


def playbook(name: str) -> Path:
    """Absolute path of ``playbooks/<name>`` (``.yml`` added when missing)."""
    if not name.endswith((".yml", ".yaml")):
        name = f"{name}.yml"
    return playbooks_dir() / name


def ansible_cfg() -> Path:
    return ansible_root() / "ansible.cfg"


def data_dir() -> Path:
    """Package data: version lock, serving profiles."""
    return _PACKAGE_DIR / "data"

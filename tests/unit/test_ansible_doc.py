"""Every module and filter of the collection provision.ascend has documentation that ``ansible-doc`` loads, as
a user of the installed collection reads it, and a filter's documented options are its parameters."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.paths import COLLECTION, ansible_root, collections_path
from tests.helpers import load_module

pytestmark = pytest.mark.unit
ROOT = ansible_root()
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"


def ansible_doc(*args: str) -> tuple[dict[str, Any], str]:
    """``ansible-doc --json ARGS`` with the collection on the collections path: (its JSON, its stderr)."""
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path()), "ANSIBLE_NOCOLOR": "1"}
    done = subprocess.run(
        [str(ANSIBLE_DOC), "--json", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def module_names() -> list[str]:
    names = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
    assert {"ascend_facts", "systemd_unit", "vllm_health"} <= set(names), names  # the scan saw the modules
    return names


def filter_functions() -> dict[str, Any]:
    """Filter name -> its function, from every file of plugins/filter."""
    found: dict[str, Any] = {}
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        module = load_module(f"_doc_filter_{path.stem}", path)
        found.update(module.FilterModule().filters())
    assert len(found) >= 30  # the scan saw the filters
    return found


def test_every_module_and_action_has_documentation_that_loads() -> None:
    names = module_names()
    docs, stderr = ansible_doc("-t", "module", *(f"{COLLECTION}.{n}" for n in names))
    assert "[ERROR]" not in stderr and "[WARNING]" not in stderr, stderr
    assert sorted(docs) == [f"{COLLECTION}.{n}" for n in names]
    for name, entry in docs.items():
        assert entry["doc"]["short_description"], name
        assert entry["examples"] and f"{name}:" in entry["examples"], f"{name}: EXAMPLES call it by FQCN"
        assert entry["return"], f"{name}: no RETURN"


def test_ansible_doc_lists_every_filter_and_none_undocumented() -> None:
    listed, stderr = ansible_doc("-t", "filter", "-l", COLLECTION)
    assert "[WARNING]" not in stderr, stderr  # a filter file that does not load is only a warning
    assert sorted(listed) == sorted(f"{COLLECTION}.{n}" for n in filter_functions())
    assert {name: text for name, text in listed.items() if text == "UNDOCUMENTED"} == {}


def test_every_filter_documents_its_parameters() -> None:
    functions = filter_functions()
    docs, stderr = ansible_doc("-t", "filter", *(f"{COLLECTION}.{n}" for n in functions))
    assert "[ERROR]" not in stderr and "[WARNING]" not in stderr, stderr
    assert sorted(docs) == sorted(f"{COLLECTION}.{n}" for n in functions)
    wrong: dict[str, Any] = {}
    for name, function in functions.items():
        entry = docs[f"{COLLECTION}.{name}"]
        params = list(inspect.signature(function).parameters.values())
        # Ansible passes the value left of the pipe as the first argument, documented as `_input`.
        wanted = {
            "_input" if i == 0 else p.name: p.default is inspect.Parameter.empty for i, p in enumerate(params)
        }
        options = entry["doc"].get("options") or {}
        documented = {key: bool(option.get("required")) for key, option in options.items()}
        if documented != wanted or not entry["examples"] or "_value" not in (entry["return"] or {}):
            wrong[name] = {"documented (required?)": documented, "parameters (required?)": wanted}
        elif f"{COLLECTION}.{name}" not in entry["examples"]:
            wrong[name] = "EXAMPLES do not call it by FQCN"
    assert wrong == {}

#!/usr/bin/env python3
"""Print pip constraints that pin every runtime dependency of provision and provision-sim, and the extras
named in FLOORED_EXTRAS, to the lowest version their pyproject.toml allows (``name>=X`` -> ``name==X``), for
the unit run at the floors in .ci/run.

A dependency without a ``>=`` floor is an error: "any version" is a claim that run cannot check.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = [ROOT / "pyproject.toml", ROOT / "provision-sim" / "pyproject.toml"]
# The project's own distributions, installed from the checkout.
OURS = {"provision", "provision-sim"}
# Extras whose floors the unit layer proves (their packages are in the test extra too). Not `report`:
# matplotlib 3.7.0 was built against NumPy 1 and does not import beside the NumPy 2 pip resolves.
FLOORED_EXTRAS = ("tokenizer",)


def floors() -> dict[str, str]:
    found: dict[str, str] = {}
    for project in PROJECTS:
        table = tomllib.loads(project.read_text(encoding="utf-8"))["project"]
        extras = table.get("optional-dependencies", {})
        for spec in [*table["dependencies"], *(s for extra in FLOORED_EXTRAS for s in extras.get(extra, []))]:
            name = re.split(r"[<>=!~;\[\s]", spec, maxsplit=1)[0].strip().lower()
            if name in OURS:
                continue
            floor = re.search(r">=\s*([^,;\s]+)", spec)
            if floor is None:
                sys.exit(f"{project.relative_to(ROOT)}: {spec!r} has no lower bound (>=)")
            if found.get(name, floor.group(1)) != floor.group(1):
                sys.exit(f"{name}: two floors ({found[name]}, {floor.group(1)}) in {PROJECTS}")
            found[name] = floor.group(1)
    return found


if __name__ == "__main__":
    for name, version in sorted(floors().items()):
        print(f"{name}=={version}")

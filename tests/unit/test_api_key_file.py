"""``--api-key-file`` on every verb that takes an API key (bench, serve status): its errors exit 2 naming the
option and the path before anything is contacted, and the key it holds is the one sent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests import helpers

pytestmark = pytest.mark.unit

# A closed port: a verb that got past its options would report it unreachable (exit 1), not exit 2.
URL = "http://127.0.0.1:9"
VERBS = {"bench": ["bench", URL], "serve status": ["serve", "status", URL]}


def run(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    monkeypatch.setenv("PROVISION_QUIET", "1")
    code = helpers.run_cli(args, monkeypatch)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output
    return code, output


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "no-such-key"


def _folder(tmp_path: Path) -> Path:
    return tmp_path


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text("")
    return path


def _blank_first_line(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_text("  \nthe-key-on-line-2\n")
    return path


def _not_text(tmp_path: Path) -> Path:
    path = tmp_path / "key"
    path.write_bytes(b"\xff\xfe\x00k")
    return path


FILE_PROBLEMS = {
    "missing": (_missing, "no such file"),
    "folder": (_folder, "is a folder, not a file"),
    "empty": (_empty, "is empty (the key is its first line)"),
    "blank first line": (_blank_first_line, "is empty (the key is its first line)"),
    "not text": (_not_text, "cannot read it: not UTF-8 text"),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("problem", sorted(FILE_PROBLEMS))
def test_a_key_file_that_cannot_give_a_key_exits_2_naming_option_and_path(
    verb: str,
    problem: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make, says = FILE_PROBLEMS[problem]
    path = make(tmp_path)
    code, output = run([*VERBS[verb], "--api-key-file", str(path)], monkeypatch, capsys)
    assert code == 2, output
    assert f"error: --api-key-file {path}: {says}" in output


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_an_unreadable_key_file_exits_2(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "key"
    path.write_text("k\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads a mode-0 file: make the read fail as it does for anyone else
        real = Path.read_text

        def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", read_text)
    code, output = run([*VERBS[verb], "--api-key-file", str(path)], monkeypatch, capsys)
    assert code == 2, output
    assert f"error: --api-key-file {path}: cannot read it: Permission denied" in output


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_api_key_on_argv_with_a_key_file_from_the_environment_exits_2(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "key"
    path.write_text("k\n")
    monkeypatch.setenv("PROVISION_API_KEY_FILE", str(path))
    code, output = run([*VERBS[verb], "--api-key", "typed"], monkeypatch, capsys)
    assert code == 2, output
    assert "error: --api-key and --api-key-file: give one of them" in output


def test_serve_status_of_an_inventory_sends_the_key_file_s_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ansible_runner

    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[npu_nodes]\nnode1 ansible_host=192.0.2.1\n")
    path = tmp_path / "key"
    path.write_text("key-from-file\n")
    calls: list[dict[str, Any]] = []

    def fake_run(**kwargs: Any) -> Any:
        calls.append(kwargs)
        endpoint = {
            "pool": "a",
            "url": "http://192.0.2.1:8000",
            "state": "ready",
            "ready": True,
            "reason": "ok",
        }
        data = {"host": "node1", "res": {"endpoints": [endpoint]}}
        kwargs["event_handler"]({"event": "runner_on_ok", "event_data": data})
        return type("Runner", (), {"rc": 0, "status": "successful"})()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    code, output = run(["serve", "status", str(inventory), "--api-key-file", str(path)], monkeypatch, capsys)
    assert code == 0, output
    [call] = calls
    assert call["extravars"] == {"vllm_serve_api_key": "key-from-file"}
    assert "warning" not in output

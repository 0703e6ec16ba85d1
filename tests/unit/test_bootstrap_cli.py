"""`provision bootstrap` input checks: bad input exits 2 before any host is contacted; secrets stay hidden."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from provision.bootstrap.credentials import (
    MASK,
    PasswordSource,
    Secret,
    ensure_deploy_key,
    password_from_env,
    password_from_file,
    scrub,
)
from provision.bootstrap.run import read_hosts_file
from provision.cli import app, bootstrap
from provision.errors import InputError
from tests import helpers

pytestmark = pytest.mark.unit

if not any(c.name == "bootstrap" for c in app.registered_commands):
    bootstrap.register(app)


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`provision bootstrap ARGS`, quiet; its exit code."""
    monkeypatch.setenv("PROVISION_QUIET", "1")
    return helpers.run_cli(["bootstrap", *args], monkeypatch)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no hosts: give HOST arguments or --from FILE"),
        (["--password-file", "x", "--password-env", "Y", "h"], "not both"),
        (["--deploy-user", "root", "h"], "--deploy-user 'root'"),
        (["--host-key", "other=SHA256:" + "A" * 43, "h"], "--host-key for other: not among the hosts"),
        (["--host-key", "MD5:00:11", "h"], "expected SHA256:<43 base64 characters>"),
        (["--password-env", "PROVISION_TEST_UNSET_VARIABLE", "h"], "is not set or empty"),
        (["--trust-known-hosts", "/no/such/file", "h"], "--trust-known-hosts /no/such/file: no such file"),
        (["h=bad host"], "no address"),
        (["h1", "h1"], "host h1 is given twice"),
    ],
)
def test_bad_input_exits_2_and_contacts_no_host(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PROVISION_TEST_UNSET_VARIABLE", raising=False)
    inventory = tmp_path / "inventory.ini"
    code = run_cli(["-i", str(inventory), "--deploy-key", str(tmp_path / "k"), *args], monkeypatch)
    captured = capsys.readouterr()
    assert code == 2, captured
    assert message in captured.err
    assert not inventory.exists()


def test_yaml_inventory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["-i", str(tmp_path / "hosts.yml"), "h"], monkeypatch) == 2
    assert "bootstrap writes INI inventories" in capsys.readouterr().err


def test_closed_port_fails_that_host_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.ini"
    port = free_port()
    args = ["-i", str(inventory), "--deploy-key", str(tmp_path / "k"), f"lo=127.0.0.1:{port}"]
    assert run_cli(args, monkeypatch) == 1
    out = capsys.readouterr().out
    assert f"FAILED lo (unreachable):\n    lo (127.0.0.1:{port}): connection refused on port {port}" in out
    assert "1 host(s): 0 changed, 0 unchanged, 1 failed (lo)" in out
    assert not inventory.exists()
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "k.pub").read_text().startswith("ssh-ed25519 ")


def test_hosts_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_text("# rack 3\nnode1=10.0.0.1   # top\n\n  admin@10.0.0.2:2222\n")
    assert read_hosts_file(path) == ["node1=10.0.0.1", "admin@10.0.0.2:2222"]


def test_passwords_do_not_print_themselves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret pass\nsecond line ignored\n")
    secret = password_from_file(path)
    assert secret.reveal() == "s3cret pass"
    assert str(secret) == MASK and "s3cret" not in repr(secret) and "s3cret" not in f"{[secret]}"
    assert scrub("sh: 1: s3cret pass: not found", [secret]) == f"sh: 1: {MASK}: not found"
    monkeypatch.setenv("PW_VAR", "from-env")
    assert password_from_env("PW_VAR").reveal() == "from-env"
    path.write_text("\n")
    with pytest.raises(InputError, match="the first line is empty"):
        password_from_file(path)


def test_password_prompt_is_asked_once_and_only_when_needed() -> None:
    asked: list[int] = []

    def prompt() -> str:
        asked.append(1)
        return "typed"

    source = PasswordSource(prompt=prompt)
    assert source.known() == []
    first, second = source.get(), source.get()
    assert first is second and first is not None and first.reveal() == "typed"
    assert asked == [1]
    assert PasswordSource(Secret("x")).known()[0].reveal() == "x"
    assert not PasswordSource().available


def test_deploy_key_is_generated_once(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "deploy"
    first = ensure_deploy_key(path, "provision@test")
    again = ensure_deploy_key(path, "provision@test")
    assert first.created and not again.created
    assert first.public_line == again.public_line
    assert first.public_line.endswith(" provision@test")
    assert (path.parent / "deploy.pub").read_text().split()[:2] == first.public_line.split()[:2]

"""Option values the CLI cannot use are refused at the edge: exit 2, one line naming the option (and the file
or pattern), no traceback, and no host touched.

Every run of Ansible is replaced by a recording fake (and ansible-runner itself by one that fails the test),
so a refusal is proven to come before any host, and an accepted value is asserted where it reaches the run.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from provision.cli import _inputs, _playbook
from provision.cli import apply as apply_cli
from provision.cli import bootstrap as bootstrap_cli
from provision.cli import serve as serve_cli
from provision.errors import InputError
from provision.inventory.load import load_inventory
from provision.inventory.validate import VALIDATED_VARS
from provision.runner.run import RunResult
from provision.serving.health import State, Verdict
from tests import helpers

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).parents[2] / "examples"
GROUPS = "groups: npu_nodes, rack_a"


def run_cli(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """Exit code and everything printed (stdout + stderr); no traceback, whatever the input."""
    code = helpers.run_cli(args, monkeypatch)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert "Traceback" not in output
    return code, output


@pytest.fixture(autouse=True)
def no_host_is_touched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ansible_runner

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a test got as far as ansible-runner")

    monkeypatch.setattr(ansible_runner, "run", refuse)
    monkeypatch.setenv("PROVISION_QUIET", "1")
    monkeypatch.setenv("PROVISION_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("PROVISION_FORKS", raising=False)
    monkeypatch.delenv("PROVISION_PARALLEL", raising=False)
    for name in ("PROVISION_DOCKER_HOST", "DOCKER_HOST"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """The shipped example (atlas-a01, atlas-a02 in npu_nodes and rack_a), unreachable addresses."""
    folder = tmp_path / "inventory"
    shutil.copytree(EXAMPLES, folder)
    return folder / "inventory.ini"


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """What reached a playbook run (plan and apply go through run_playbook, an apply of site.yml through
    apply's converge): one dict of its arguments per run."""
    calls: list[dict[str, Any]] = []

    def result(playbook: str) -> RunResult:
        return RunResult(
            playbook=playbook, rc=0, status="successful", run_dir=tmp_path, seconds=0, check=False
        )

    def fake_run(playbook: str, inventory: Path, **kwargs: Any) -> RunResult:
        calls.append({"via": "run_playbook", "playbook": playbook, **kwargs})
        return result(playbook)

    def fake_converge(loaded: Any, inventory: Path, **kwargs: Any) -> RunResult:
        calls.append({"via": "converge", "playbook": "site", **kwargs})
        return result("site")

    monkeypatch.setattr(_playbook, "run_playbook", fake_run)
    monkeypatch.setattr(apply_cli, "converge", fake_converge)
    return calls


# ------------------------------------------------------------------------------------------ -e


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{bad json", "-e '{bad json': not valid YAML or JSON: While parsing a flow mapping"),
        ("[1,2]", "-e '[1,2]': not a mapping of variable names to values; it is a list"),
        ('{"a": 1}}', """-e '{"a": 1}}': not valid YAML or JSON: Did not find expected <document start>"""),
        ("a=1 foo", "-e 'a=1 foo': 'foo' is not key=value"),
        ('a="unterminated', """-e 'a="unterminated': failed at splitting arguments, either an unbalanced"""),
        ("./vars.yml", "-e ./vars.yml: a file is given as @./vars.yml"),
        ("@", "-e @: no file named after @"),
    ],
)
def test_inline_extra_vars_ansible_would_refuse_exit_2_naming_e(
    value: str,
    expected: str,
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(["plan", str(inventory), "-e", value], monkeypatch, capsys)
    assert code == 2
    assert f"error: {expected}" in output
    assert "inventory" not in output  # blamed on -e, not on the inventory parser
    assert runs == []


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("missing.json", None, "-e @missing.json: no such file {path}"),
        (
            "list.yml",
            b"- 1\n- 2\n",
            "-e @list.yml: not a mapping of variable names to values; {path} holds a list",
        ),
        ("empty.yml", b"", "{path} holds nothing"),
        ("latin1.yml", b"a: 1\nname: caf\xe9\n", "-e @latin1.yml: {path}:2: not UTF-8 text"),
        (
            "bad.yml",
            b"a: 1\nb: [1\nc: 2\n",
            "-e @bad.yml: {path}:3: not valid YAML or JSON: While parsing a flow",
        ),
        ("bad.json", b'{"a": 1,,}', "-e @bad.json: {path}:1: not valid YAML or JSON"),
        ("folder", "dir", "-e @folder: {path} is not a file"),
    ],
)
def test_an_extra_vars_file_that_cannot_be_used_exits_2_naming_it(
    name: str,
    content: bytes | str | None,
    expected: str,
    inventory: Path,
    runs: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    code, output = run_cli(["apply", str(inventory), "-e", f"@{name}"], monkeypatch, capsys)
    assert code == 2
    assert expected.format(path=path) in output
    assert runs == []


def test_a_relative_extra_vars_file_is_read_from_the_current_directory(
    inventory: Path,
    runs: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = tmp_path / "work" / "sub"
    work.mkdir(parents=True)
    (work / "vars.json").write_text('{"preflight_min_free_gb": 5}')
    (work.parent / "more.yml").write_text("a: 1\n")
    monkeypatch.chdir(work)
    code, _ = run_cli(["plan", str(inventory), "-e", "@vars.json", "-e", "@../more.yml"], monkeypatch, capsys)
    assert code == 0
    # absolute, so ansible-playbook (run in ansible-runner's own directory) finds the files the user meant
    assert runs[0]["extra_vars"] == [f"@{work / 'vars.json'}", f"@{work.parent / 'more.yml'}"]


def test_key_value_json_and_yaml_extra_vars_keep_working(
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = ["a=1 b=2", 'c="x y" d=\'q\' e="k=v"', '{"f": [1, 2]}', "{g: yes}", "ascend_driver_serial=1"]
    args = ["apply", str(inventory)]
    for value in values:
        args += ["-e", value]
    code, _ = run_cli(args, monkeypatch, capsys)
    assert code == 0
    # handed on exactly as given (ansible-playbook parses them again, the same way); and an apply with -e
    # runs site.yml on every node, not through the records
    assert [(r["via"], r["playbook"], r["extra_vars"]) for r in runs] == [("run_playbook", "site", values)]
    assert _inputs.variables("a=1 b=2") == {"a": "1", "b": "2"}
    assert _inputs.variables('c="x y" d=\'q\' e="k=v"') == {"c": "x y", "d": "q", "e": "k=v"}
    assert _inputs.variables('{"f": [1, 2]}') == {"f": [1, 2]}
    assert _inputs.variables("{g: yes}") == {"g": True}


def test_an_empty_extra_var_is_dropped_as_ansible_drops_it(
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _ = run_cli(["apply", str(inventory), "-e", "", "-e", "a=1"], monkeypatch, capsys)
    assert code == 0
    assert [(r["via"], r["extra_vars"]) for r in runs] == [("run_playbook", ["a=1"])]


def test_a_vault_encrypted_vars_file_is_handed_on_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret.yml"
    secret.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162636465\n")
    assert _inputs.variables("@secret.yml", cwd=tmp_path) is None  # ansible-playbook decrypts it
    assert _inputs.extra_vars(["@secret.yml"], cwd=tmp_path) == [f"@{secret}"]


# ------------------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("args", "env", "option"),
    [
        (["plan", "{inv}", "--forks", "0"], {}, "'--forks' / '-f' (env var: 'PROVISION_FORKS')"),
        (["apply", "{inv}", "-f", "-3"], {}, "'--forks' / '-f' (env var: 'PROVISION_FORKS')"),
        (["apply", "{inv}"], {"PROVISION_FORKS": "0"}, "'--forks' / '-f' (env var: 'PROVISION_FORKS')"),
        (
            ["bootstrap", "-i", "{inv}", "--parallel", "0", "n1"],
            {},
            "'--parallel' (env var: 'PROVISION_PARALLEL')",
        ),
        (
            ["bootstrap", "-i", "{inv}", "n1"],
            {"PROVISION_PARALLEL": "-1"},
            "'--parallel' (env var: 'PROVISION_PARALLEL')",
        ),
        (["bootstrap", "-i", "{inv}", "--port", "0", "n1"], {}, "'--port'"),
    ],
)
def test_counts_below_1_are_usage_errors(
    args: list[str],
    env: dict[str, str],
    option: str,
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, output = run_cli([a.format(inv=inventory) for a in args], monkeypatch, capsys)
    assert code == 2
    assert f"Invalid value for {option}: Input should be greater than or equal to 1" in output
    assert runs == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["bootstrap", "-i", "{inv}", "--port", "70000", "n1"], "'--port': Input should be less than"),
        (
            ["bootstrap", "-i", "{inv}", "--timeout", "-1", "n1"],
            "'--timeout': must be a number of seconds above 0",
        ),
        (["bootstrap", "-i", "{inv}", "--timeout", "nan", "n1"], "'--timeout': must be a number of seconds"),
        (
            ["serve", "status", "h:8000", "--completion-timeout", "-5"],
            "'--completion-timeout': must be a number",
        ),
        (
            ["serve", "status", "h:8000", "--completion-timeout", "0"],
            "'--completion-timeout': must be a number",
        ),
        (
            ["serve", "status", "h:8000", "--completion-timeout", "inf"],
            "'--completion-timeout': must be a number",
        ),
        (
            ["serve", "status", "{inv}", "--log-lines", "-1"],
            "'--log-lines': Input should be greater than or equal to 0",
        ),
    ],
)
def test_numbers_out_of_range_are_usage_errors(
    args: list[str],
    expected: str,
    inventory: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(bootstrap_cli, "bootstrap_all", _never)
    monkeypatch.setattr(serve_cli, "check", _never)
    code, output = run_cli([a.format(inv=inventory) for a in args], monkeypatch, capsys)
    assert code == 2
    assert f"Invalid value for {expected}" in output


def test_a_valid_forks_reaches_the_run(
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PROVISION_FORKS", "7")
    assert run_cli(["apply", str(inventory)], monkeypatch, capsys)[0] == 0
    assert run_cli(["plan", str(inventory), "--forks", "3"], monkeypatch, capsys)[0] == 0
    assert [(r["via"], r["forks"]) for r in runs] == [("converge", 7), ("run_playbook", 3)]


def test_seconds_accepts_a_positive_finite_number() -> None:
    assert _inputs.seconds(0.5) == 0.5
    assert _inputs.seconds(None) is None
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(Exception, match="must be a number of seconds above 0"):
            _inputs.seconds(bad)


# ------------------------------------------------------------------------------------------ --limit


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("nohost", "--limit nohost: matches no host or group of {inv} ({groups}; 2 host(s))"),
        ("atlas-a01:nohost", "--limit atlas-a01:nohost: nohost matches no host or group of {inv} ({groups}"),
        ("rack_a:!atlas-a09", "--limit rack_a:!atlas-a09: !atlas-a09 matches no host or group"),
        ("nohost,ghost*", "--limit nohost,ghost*: nohost, ghost* match no host or group"),
        ("atlas-a01:&atlas-a02", "--limit atlas-a01:&atlas-a02: leaves no host of {inv} ({groups})"),
        ("~(", "--limit ~(: Invalid host list pattern: ~("),
        ("@missing.txt", "--limit @missing.txt: no such file {tmp}/missing.txt"),
        ("@empty.txt", "--limit @empty.txt: {tmp}/empty.txt names no host"),
        ("@limits", "--limit @limits: {tmp}/limits is not a file"),
    ],
)
def test_a_limit_that_matches_nothing_exits_2_naming_it_and_the_groups(
    pattern: str,
    expected: str,
    inventory: Path,
    runs: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "limits").mkdir()
    for verb in ("plan", "apply"):
        code, output = run_cli([verb, str(inventory), "--limit", pattern], monkeypatch, capsys)
        assert code == 2
        assert "error: " + expected.format(inv=inventory, groups=GROUPS, tmp=tmp_path) in output
    assert runs == []


@pytest.mark.parametrize(
    "pattern",
    [
        "atlas-a01",
        "rack_a",
        "atlas-a01:atlas-a02",
        "atlas-a01,atlas-a02",
        "npu_nodes:!atlas-a02",
        "npu_nodes:&rack_a",
        "atlas*",
        "~atlas-a0[12]",
        "npu_nodes[0]",
        "all",
    ],
)
def test_ansible_patterns_that_match_keep_working(
    pattern: str,
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli(["apply", str(inventory), "-l", pattern], monkeypatch, capsys)[0] == 0
    assert run_cli(["plan", str(inventory), "--limit", pattern], monkeypatch, capsys)[0] == 0
    assert [(r["via"], r["limit"]) for r in runs] == [("converge", pattern), ("run_playbook", pattern)]


def test_a_limit_file_is_read_from_the_current_directory(
    inventory: Path,
    runs: list[dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "retry.txt").write_text("atlas-a02\n\n")
    monkeypatch.chdir(tmp_path)
    code, _ = run_cli(["plan", str(inventory), "--limit", "atlas-a01,@retry.txt"], monkeypatch, capsys)
    assert code == 0
    assert runs[0]["limit"] == f"atlas-a01,@{tmp_path / 'retry.txt'}"


def test_hosts_matching_uses_ansible_patterns_and_only_the_inventory_hosts(inventory: Path) -> None:
    loaded = load_inventory(inventory)
    assert loaded.hosts_matching("npu_nodes:!atlas-a01") == ["atlas-a02"]
    assert loaded.hosts_matching(["rack_a", "&atlas-a02"]) == ["atlas-a02"]
    assert loaded.hosts_matching("localhost") == []  # Ansible's implicit localhost is not in the inventory
    assert loaded.hosts_matching("nohost") == []


# ------------------------------------------------------------------------------------------ -p


def test_an_unknown_playbook_exits_2_listing_the_shipped_ones(
    inventory: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for verb, name in (("apply", "nosuchplaybook"), ("plan", "tasks")):
        code, output = run_cli([verb, str(inventory), "-p", name], monkeypatch, capsys)
        assert code == 2
        assert f"error: --playbook {name}: no such playbook; there are: " in output
        assert "preflight, " in output and "site, " in output
    assert runs == []
    assert run_cli(["plan", str(inventory), "-p", "preflight.yml"], monkeypatch, capsys)[0] == 0
    assert [r["playbook"] for r in runs] == ["preflight.yml"]


# ------------------------------------------------------------------------------------------ serve status


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a bad input got as far as a probe or a host")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:99999", "http://h:99999: not a valid URL: Port out of range 0-65535"),
        ("http://h:8000a", "http://h:8000a: not a valid URL: Port could not be cast to integer value"),
        ("h:8000a", "h:8000a: not a valid URL: Port could not be cast"),
        ("http://:8000", "http://:8000: no host in the URL"),
        ("http://[::1", "http://[::1: not a valid URL: Invalid IPv6 URL"),
        ("http://h:0", "http://h:0: port 0 is not a port a server listens on"),
        (
            "http://user:pw@h:8000",
            "http://user:pw@h:8000: credentials in the URL are not sent; give --api-key",
        ),
        ("http://h:8000/?x=1", "http://h:8000/?x=1: a base URL has no ?query or #fragment"),
        ("ftp://h", "ftp://h: not an http(s) URL"),
        ("nosuch.ini", "nosuch.ini: no such inventory file (nor a URL)"),
    ],
)
def test_serve_status_refuses_a_url_no_request_could_go_to(
    url: str, expected: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(serve_cli, "check", _never)
    code, output = run_cli(["serve", "status", "http://ok:8000", url], monkeypatch, capsys)
    assert code == 2
    assert f"error: {expected}" in output


def test_serve_status_probes_the_urls_it_accepts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[tuple[str, float]] = []

    def fake_check(endpoint: Any, *, timeouts: Any) -> Verdict:
        seen.append((endpoint.url, timeouts.completion_s))
        return Verdict(State.READY, "ok", url=endpoint.url, model="m")

    monkeypatch.setattr(serve_cli, "check", fake_check)
    urls = ["10.0.0.5:8000", "https://[::1]:8443/", "http://node-1"]
    code, _ = run_cli(["serve", "status", *urls, "--completion-timeout", "2.5"], monkeypatch, capsys)
    assert code == 0
    assert sorted(seen) == sorted(
        [("http://10.0.0.5:8000", 2.5), ("https://[::1]:8443/", 2.5), ("http://node-1", 2.5)]
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["http://h:8000", "--limit", "node1"], "--limit applies to an inventory, not to URLs"),
        (["http://h:8000", "--log-lines", "5"], "--log-lines applies to an inventory, not to URLs"),
        (["{inv}", "http://h:8000"], "{inv}: an inventory is given alone, without URLs"),
        (["{inv}", "--limit", "nohost"], "--limit nohost: matches no host or group of {inv} ({groups}"),
        (["{inv}", "--model", "m"], "--model applies to URLs"),
    ],
)
def test_serve_status_refuses_options_that_do_not_apply(
    args: list[str],
    expected: str,
    inventory: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(serve_cli, "check", _never)
    monkeypatch.setattr(serve_cli, "probe_inventory", _never)
    code, output = run_cli(["serve", "status", *[a.format(inv=inventory) for a in args]], monkeypatch, capsys)
    assert code == 2
    assert "error: " + expected.format(inv=inventory, groups=GROUPS) in output


def test_serve_status_of_an_inventory_passes_a_matching_limit_on(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[dict[str, Any]] = []

    def fake_probe(path: Path, **kwargs: Any) -> list[dict[str, Any]]:
        seen.append(kwargs)
        return []

    monkeypatch.setattr(serve_cli, "probe_inventory", fake_probe)
    code, _ = run_cli(["serve", "status", str(inventory), "-l", "rack_a:!atlas-a02"], monkeypatch, capsys)
    assert code == 1  # no instance at all: not ready
    assert [(s["limit"], s["log_lines"]) for s in seen] == [("rack_a:!atlas-a02", serve_cli.LOG_LINES)]


def test_serve_status_of_an_inventory_probes_ad_hoc_and_keeps_no_run_directory(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probe reaches ansible-runner through the runner's one seam (its environment, a throw-away run
    directory that takes the API key with it); a headless worker is listed but does not count."""
    import ansible_runner

    from provision.runner.run import ansible_env

    calls: list[dict[str, Any]] = []
    endpoints = [
        {"pool": "a", "url": "http://10.0.0.1:8000", "state": "ready", "ready": True, "reason": "ok",
         "role": "single"},
        {"pool": "b", "url": "-", "state": "worker", "ready": None, "reason": "worker of atlas-a02/b",
         "role": "worker"},
    ]  # fmt: skip

    def fake_run(**kwargs: Any) -> Any:
        calls.append(kwargs)
        assert Path(kwargs["private_data_dir"]).is_dir()
        data = {"host": "atlas-a01", "res": {"endpoints": endpoints}}
        kwargs["event_handler"]({"event": "runner_on_ok", "event_data": data})
        return type("Runner", (), {"rc": 0, "status": "successful"})()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    code, output = run_cli(["serve", "status", str(inventory), "--api-key", "s3cret"], monkeypatch, capsys)
    assert code == 0, output
    assert "1/1 ready on 1 host(s) (+ 1 multi-node worker(s), answered for by their head)" in output
    [call] = calls
    assert call["module"] == "provision.ascend.vllm_health"
    assert call["host_pattern"] == "npu_nodes"
    assert call["extravars"] == {"vllm_serve_api_key": "s3cret"}
    assert call["envvars"] == ansible_env()
    assert not Path(call["private_data_dir"]).exists()


def test_serve_status_of_an_inventory_no_host_answered_shows_ansible_s_words(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ansible_runner

    def fake_run(**kwargs: Any) -> Any:
        artifacts = Path(kwargs["private_data_dir"]) / "artifacts" / "x"
        artifacts.mkdir(parents=True)
        (artifacts / "stdout").write_text("ERROR! the module vllm_health was not found\n")
        return type("Runner", (), {"rc": 2, "status": "failed"})()

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    code, output = run_cli(["serve", "status", str(inventory)], monkeypatch, capsys)
    assert code == 2
    assert f"error: could not probe {inventory}: ERROR! the module vllm_health was not found" in output


# ------------------------------------------------------------------------------------------ paths, engine


def test_bootstrap_refuses_paths_it_cannot_write_before_any_host(
    inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bootstrap_cli, "bootstrap_all", _never)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    key = blocker / "key"  # its folder would be a file
    code, output = run_cli(
        ["bootstrap", "-i", str(inventory), "--deploy-key", str(key), "n1=192.0.2.1"], monkeypatch, capsys
    )
    assert code == 2
    assert f"error: --deploy-key {key}: cannot create it: " in output
    code, output = run_cli(
        ["bootstrap", "-i", str(inventory), "--known-hosts", str(tmp_path), "n1=192.0.2.1"],
        monkeypatch,
        capsys,
    )
    assert code == 2
    assert f"error: --known-hosts {tmp_path}: not a file" in output


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        (
            {},
            ["--engine", "tcp://10.0.0.1:99999"],
            "--engine/$PROVISION_DOCKER_HOST tcp://10.0.0.1:99999: not an",
        ),
        (
            {"PROVISION_DOCKER_HOST": "ssh://u@h:99999"},
            [],
            "--engine/$PROVISION_DOCKER_HOST ssh://u@h:99999: not",
        ),
        (
            {"DOCKER_HOST": "tcp://h:abc"},
            [],
            "$DOCKER_HOST tcp://h:abc: not an engine address: Port could not",
        ),
        (
            {},
            ["--engine", "h:2375"],
            "--engine/$PROVISION_DOCKER_HOST h:2375: not an engine address: Invalid bind",
        ),
    ],
)
def test_image_refuses_an_engine_address_the_docker_sdk_cannot_parse(
    env: dict[str, str],
    args: list[str],
    expected: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import provision.image.engine

    monkeypatch.setattr(provision.image.engine, "connect", _never)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, output = run_cli(["image", "push", "registry.example/x:1", *args], monkeypatch, capsys)
    assert code == 2
    assert f"error: {expected}" in output


def test_engine_accepts_the_addresses_docker_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    for address in ("unix:///run/podman/podman.sock", "tcp://10.0.0.1:2375", "ssh://u@h", None):
        assert _inputs.engine(address) == address
    with pytest.raises(InputError, match="Port out of range"):
        _inputs.engine("tcp://h:70000")


# ------------------------------------------------------------------------------------------ checked once


def _plain_inventory(tmp_path: Path, extra: str = "") -> Path:
    """Two nodes whose every variable is plain data (the example's API key is a lookup: a template)."""
    folder = tmp_path / "plain"
    (folder / "group_vars").mkdir(parents=True)
    (folder / "inventory.ini").write_text(
        "[npu_nodes]\nnode1 ansible_host=192.0.2.1\nnode2 ansible_host=192.0.2.2\n"
    )
    (folder / "group_vars" / "npu_nodes.yml").write_text(
        "ascend_npu_count: 8\nvllm_serve_api_key: k3y\n" + extra
    )
    return folder / "inventory.ini"


def test_the_playbooks_are_told_the_checks_were_made_only_when_they_were(
    tmp_path: Path,
    runs: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """provision_validated reaches a run only when validate judged every variable it reads: plain values
    and no -e (the roles' argument checks and preflight's inventory check are then not made on the nodes)."""
    plain = _plain_inventory(tmp_path)
    assert run_cli(["plan", str(plain)], monkeypatch, capsys)[0] == 0
    assert run_cli(["apply", str(plain)], monkeypatch, capsys)[0] == 0
    assert run_cli(["plan", str(plain), "-e", "a=1"], monkeypatch, capsys)[0] == 0
    templated = _plain_inventory(tmp_path / "t", 'vllm_serve_poll_s: "{{ 1 + 1 }}"\n')
    assert run_cli(["plan", str(templated)], monkeypatch, capsys)[0] == 0
    assert run_cli(["apply", str(templated)], monkeypatch, capsys)[0] == 0
    assert [(r["via"], r.get("extra_vars"), r.get("validated")) for r in runs] == [
        ("run_playbook", [VALIDATED_VARS], None),
        ("converge", None, True),
        ("run_playbook", ["a=1"], None),
        ("run_playbook", [], None),
        ("converge", None, False),
    ]

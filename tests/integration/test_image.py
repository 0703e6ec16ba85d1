"""`provision image` for real: a private dockerd, a local registry with htpasswd, an offline build.

The bench (``provision_sim.image_bench``) is what an air-gapped site has: the base image comes from a local
Debian rootfs (the CANN image cannot be pulled here), OS packages from a local apt repository, Python packages
from a local pip index, all through the Dockerfile's own build arguments (BASE_IMAGE, APT_SOURCE,
PIP_INDEX_URL, PIP_PACKAGES). Every RUN of the Dockerfile runs. The CLI runs as a user runs it (a subprocess);
dockerd, the registry and the file server are started here and stopped by PID at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from provision.image import registry as image_registry
from provision.image.build import BuildOptions, build, check_labels
from provision.image.spec import Overrides, default_target
from provision_sim import image_bench as testbed

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
SECRET = f"Pl4nted-{secrets.token_hex(8)}"
USER = "ci-bot"
# The CLI as installed, with the image verb registered if the package's verb list does not have it yet.
LAUNCH = (
    "import sys\n"
    "from provision.cli import app, main\n"
    "from provision.cli import image\n"
    "if not any(g.name == 'image' for g in app.registered_groups):\n"
    "    image.register(app)\n"
    "sys.argv[0] = 'provision'\n"
    "main()\n"
)


@dataclass
class Bench:
    bench: testbed.Bench
    registry: testbed.Registry
    home: Path
    runs: Path
    outputs: list[str]

    @property
    def client(self) -> docker.DockerClient:
        return self.bench.dockerd.client()

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PROVISION_REGISTRY", "DOCKER_", "ANSIBLE_VAULT"))
        }
        env.update(
            HOME=str(self.home),
            PROVISION_RUNS_DIR=str(self.runs),
            DOCKER_HOST=self.bench.dockerd.url,
            PROVISION_QUIET="1",
            **extra,
        )
        return env

    def cli(self, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-c", LAUNCH, "image", *args],
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.outputs += [result.stdout, result.stderr]
        return result


def _require(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        message = f"{tool} is missing: apt-get install {package}"
        if os.environ.get("PROVISION_ALLOW_SKIP") == "1":
            pytest.skip(message)
        pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    for tool, package in (
        ("dockerd", "docker.io"),
        ("docker-registry", "docker-registry"),
        ("mmdebstrap", "mmdebstrap"),
        ("dpkg-scanpackages", "dpkg-dev"),
    ):
        _require(tool, package)
    if os.geteuid() != 0:
        pytest.fail("the image bench starts dockerd: run as root", pytrace=False)
    root = tmp_path_factory.mktemp("image")
    dockerd = testbed.Dockerd(root / "dockerd")
    reg = testbed.Registry(root / "registry", user=USER, password=SECRET)
    files = testbed.FileServer(testbed.package_tree())
    try:
        dockerd.start()
        reg.start()
        files.start()
        base = testbed.base_image(dockerd.client())
        home = root / "home"
        home.mkdir()
        yield Bench(testbed.Bench(dockerd, files, base), reg, home, root / "runs", [])
    finally:
        files.stop()
        reg.stop()
        dockerd.stop()


def _target(**kwargs: Any) -> Any:
    return default_target(arch="amd64", **kwargs)


def _build_flags(bench: Bench) -> list[str]:
    return bench.bench.build_flags()


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _fail_with(result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"exit {result.returncode}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr[-4000:]}"
    )


# ----------------------------------------------------------------------------------------- build


@pytest.fixture(scope="session")
def built(bench: Bench) -> dict[str, Any]:
    """Dry run, real run (cold: every RUN of the Dockerfile), repeat run: the image of the lock's stack."""
    flags = _build_flags(bench)
    dry = bench.cli("build", *flags, "--dry-run")
    assert dry.returncode == 0, _fail_with(dry)
    real = bench.cli("build", *flags, "--platform", "linux/amd64", "--no-cache")
    assert real.returncode == 0, _fail_with(real)
    repeat = bench.cli("build", *flags, "--platform", "linux/amd64")
    assert repeat.returncode == 0, _fail_with(repeat)
    return {"dry": dry, "real": real, "repeat": repeat}


def test_dry_run_then_build_then_nothing_to_do(bench: Bench, built: dict[str, Any]) -> None:
    reference = _target().reference
    assert reference == "vllm-ascend:0.23.0-cann9.1.0-openeuler24.03-amd64"
    dry = built["dry"].stdout
    assert dry.splitlines()[:2] == [f"{reference} for linux/amd64", "would build"]
    assert f"  BASE_IMAGE={bench.bench.base}" in dry.splitlines()
    real = built["real"]
    assert real.stdout.startswith(f"built {reference} (")
    assert " for linux/amd64 in " in real.stdout
    assert "Step 1/" in real.stderr
    repeat = built["repeat"].stdout
    assert repeat.startswith(f"up to date: {reference} (") and "nothing built" in repeat


def test_every_run_step_ran_and_the_run_is_recorded(bench: Bench, built: dict[str, Any]) -> None:
    run_dir = Path(built["real"].stdout.split("run record: ")[1].strip())
    log = (run_dir / "build.log").read_text()
    assert "install-os-packages: apt-get install libjemalloc2 numactl" in log  # from the local apt repo
    assert "Successfully installed six-1.16.0" in log  # from the local pip index
    assert "useradd" in log
    result = json.loads((run_dir / "result.json").read_text())
    assert result["built"] is True and result["cached_steps"] == 0
    assert result["rebuilt_steps"] == result["steps"] - 6  # all but FROM and the 5 ARGs before it
    assert result["build_args"]["PIP_PACKAGES"] == "six==1.16.0"


def test_labels_and_config_carry_the_lock(bench: Bench, built: dict[str, Any]) -> None:
    target = _target()
    image = bench.client.images.get(target.reference)
    labels = image.labels
    assert check_labels(labels, target) == []
    assert labels["provision.pip-packages"] == "six==1.16.0"
    assert labels["org.opencontainers.image.base.name"] == bench.bench.base
    assert labels["org.opencontainers.image.revision"] == _head()
    config = image.attrs["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["/opt/provision/entrypoint.sh"]
    assert config["Healthcheck"]["Test"] == ["CMD", "python3", "/opt/provision/healthcheck.py"]
    assert config["Healthcheck"]["StartPeriod"] == 3600 * 10**9
    assert "TASK_QUEUE_ENABLE=1" in config["Env"] and "OMP_NUM_THREADS=1" in config["Env"]


def test_list_shows_what_the_lock_builds_and_what_exists(bench: Bench, built: dict[str, Any]) -> None:
    result = bench.cli("list", "--json")
    assert result.returncode == 0, _fail_with(result)
    rows = {row["reference"]: row for row in json.loads(result.stdout)["images"]}
    assert rows[_target().reference]["state"] == "present"
    assert rows[_target().reference]["label_problems"] == []
    assert rows[_target(soc="a3").reference]["state"] == "missing"
    assert rows[_target(os_variant="ubuntu22.04").reference]["state"] == "missing"
    table = bench.cli("list").stdout.splitlines()
    assert table[0].split() == ["IMAGE", "STATE", "ID", "SIZE", "CREATED"]
    # one row per lock target, the stacks in release order: the default's row says present
    listed = {line.split()[0]: line.split()[1] for line in table[1:] if line.strip()}
    assert listed[_target().reference] == "present"
    assert listed[_target(soc="a3").reference] == "missing"
    assert list(listed)[: len(rows)] == list(rows)


def test_rebuild_after_an_entrypoint_change_runs_one_step(
    bench: Bench, built: dict[str, Any], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    shutil.copy(ROOT / "Dockerfile", context / "Dockerfile")
    shutil.copytree(ROOT / "container", context / "container")
    entrypoint = context / "container" / "entrypoint.sh"
    entrypoint.write_text(entrypoint.read_text() + "# changed\n")
    options = BuildOptions(
        target=_target(repository="rebuild/vllm-ascend"),
        overrides=_overrides(bench),
        context_dir=context,
        platform="linux/amd64",
        network_mode="host",
        revision=_head(),  # the same revision label as the image built from the checkout
    )
    result = build(bench.client, options)
    rebuilt = result.rebuilt_steps
    print(
        f"rebuild after an entrypoint change: {result.seconds:.2f} s, "
        f"{rebuilt} of {result.steps} steps rebuilt"
    )
    assert result.built
    # The COPY of the scripts and the engine's label step (provision.build-digest) are all that run.
    assert rebuilt <= 2, f"{rebuilt} steps rebuilt"
    assert result.seconds < 15


def _overrides(bench: Bench) -> Overrides:
    return Overrides(
        base_image=bench.bench.base,
        pip_packages=testbed.TEST_WHEEL,
        mirrors={
            "APT_SOURCE": f"deb [trusted=yes] {bench.bench.files.url}/apt ./",
            "PIP_INDEX_URL": f"{bench.bench.files.url}/simple/",
            "PIP_EXTRA_INDEX_URL": "",
        },
    )


# ----------------------------------------------------------------------------------------- run


def _run(bench: Bench, *command: str, **kwargs: Any) -> tuple[int, str]:
    container = bench.client.containers.run(
        _target().reference, list(command), detach=True, network_mode="host", **kwargs
    )
    try:
        code = int(container.wait(timeout=120)["StatusCode"])
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_entrypoint_usage_environment_and_engine_form(bench: Bench, built: dict[str, Any]) -> None:
    code, logs = _run(bench)
    assert code == 64 and logs.startswith("usage: docker run"), logs
    code, logs = _run(
        bench,
        "bash",
        "-c",
        'id -u; echo "$LD_PRELOAD"; cat "$PROVISION_RUN_DIR/engine.pid"; '
        'python3 -c "import six; print(six.__version__)"',
    )
    uid, preload, pid, six = logs.split()
    assert (code, uid, pid, six) == (0, "10001", "1", "1.16.0"), logs
    assert preload.endswith("/libjemalloc.so.2")
    # Leading options go to the vLLM server; vllm is not installed in this test image (PIP_PACKAGES=six).
    code, logs = _run(bench, "--model", "/models/m", "--port", "8123")
    assert (
        code == 1 and "'vllm.entrypoints.openai.api_server'" in logs and "No module named 'vllm'" in logs
    ), logs


def _health(container: Any) -> dict[str, Any]:
    container.reload()
    health: dict[str, Any] = container.attrs["State"].get("Health") or {}
    return health


def _wait_health(
    container: Any, status: str, timeout: float = 60, seen: list[str] | None = None
) -> dict[str, Any]:
    """Poll Docker's health state until ``status``; ``seen`` collects every probe output on the way (Docker
    itself keeps only the last five)."""
    deadline = time.monotonic() + timeout
    health: dict[str, Any] = {}
    while time.monotonic() < deadline:
        health = _health(container)
        if seen is not None:
            for entry in health.get("Log") or []:
                line = f"{entry['Start']} {str(entry['Output']).strip()}"
                if line not in seen:
                    seen.append(line)
        if health.get("Status") == status:
            return health
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.3)
    raise AssertionError(f"health never became {status}: {json.dumps(health, indent=1)[-3000:]}")


def _last_output(health: dict[str, Any]) -> str:
    return str(health["Log"][-1]["Output"]).strip()


def _scripted_container(bench: Bench, folder: Path, start_period_s: int) -> tuple[Any, Path, int]:
    testbed.write_scripted_engine(folder)
    control = folder / "control"
    testbed.set_state(control, "loading")
    port = testbed.free_port()
    container = bench.client.containers.run(
        _target().reference,
        [
            "python3",
            "/probe/engine.py",
            "--port",
            str(port),
            "--served-model-name",
            "smollm2",
            "--control",
            "/probe/control",
        ],
        detach=True,
        network_mode="host",
        volumes={str(folder): {"bind": "/probe", "mode": "ro"}},
        # Only the timing is overridden: the probe command is the image's own HEALTHCHECK.
        healthcheck={
            "interval": 10**9,
            "timeout": 10 * 10**9,
            "retries": 2,
            "start_period": start_period_s * 10**9,
        },
    )
    return container, control, port


def test_healthcheck_states_in_docker(bench: Bench, built: dict[str, Any], tmp_path: Path) -> None:
    container, control, port = _scripted_container(bench, tmp_path / "probe", start_period_s=120)
    try:
        container.reload()
        assert container.attrs["Config"]["Healthcheck"]["Test"] == [
            "CMD",
            "python3",
            "/opt/provision/healthcheck.py",
        ]
        time.sleep(3.5)  # a few probes while the port refuses and the engine lives
        health = _health(container)
        assert health["Status"] == "starting", health
        assert _last_output(health).startswith("loading: http://127.0.0.1:"), health
        testbed.set_state(control, "ready")
        health = _wait_health(container, "healthy")
        assert _last_output(health) == f"ready: http://127.0.0.1:{port} serves smollm2"
        testbed.set_state(control, "dead")
        health = _wait_health(container, "unhealthy")
        assert _last_output(health) == f"dead: http://127.0.0.1:{port}/health answered 503"
    finally:
        container.remove(force=True)


def test_loading_past_the_start_period_turns_unhealthy(
    bench: Bench, built: dict[str, Any], tmp_path: Path
) -> None:
    container, _control, _port = _scripted_container(bench, tmp_path / "probe", start_period_s=2)
    try:
        health = _wait_health(container, "unhealthy", timeout=30)
        assert _last_output(health).startswith("loading:"), health
    finally:
        container.remove(force=True)


# ----------------------------------------------------------------------------------------- registry


@pytest.fixture(scope="session")
def pushed(bench: Bench, built: dict[str, Any]) -> dict[str, Any]:
    repository = f"{bench.registry.address}/team/vllm-ascend"
    flags = [*_build_flags(bench), "--repository", repository, "--platform", "linux/amd64"]
    anonymous = bench.cli("build", *flags, "--push")
    wrong = bench.cli(
        "build", *flags, "--push", PROVISION_REGISTRY_USER=USER, PROVISION_REGISTRY_PASSWORD="nope-x"
    )
    good = bench.cli(
        "build", *flags, "--push", PROVISION_REGISTRY_USER=USER, PROVISION_REGISTRY_PASSWORD=SECRET
    )
    assert good.returncode == 0, _fail_with(good)
    return {"repository": repository, "anonymous": anonymous, "wrong": wrong, "good": good}


def test_push_needs_the_credentials(pushed: dict[str, Any]) -> None:
    anonymous, wrong = pushed["anonymous"], pushed["wrong"]
    assert anonymous.returncode == 1 and "no basic auth credentials" in anonymous.stderr, _fail_with(
        anonymous
    )
    assert wrong.returncode == 1 and "unauthorized" in wrong.stderr, _fail_with(wrong)


def test_push_then_pull_back_by_digest(bench: Bench, pushed: dict[str, Any]) -> None:
    out = pushed["good"].stdout
    reference = f"{pushed['repository']}:{_target().tag}"
    assert f"pushed {reference}" in out
    by_digest = next(line.split()[1] for line in out.splitlines() if line.startswith("digest "))
    assert by_digest.startswith(f"{pushed['repository']}@sha256:")
    client = bench.client
    pushed_id = client.images.get(reference).id
    client.images.remove(reference)
    creds = image_registry.Credentials(USER, SECRET)
    assert image_registry.pull(client, by_digest, creds) == pushed_id  # the very image that was pushed
    assert check_labels(client.images.get(by_digest).labels, _target()) == []
    with pytest.raises(image_registry.RegistryError, match=r"unauthorized|no basic auth"):
        image_registry.pull(client, by_digest.replace("team/", "other/"), None)


def test_push_with_an_ansible_vault_file(bench: Bench, pushed: dict[str, Any], tmp_path: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    password_file = tmp_path / "vault-pass"
    password_file.write_text("vault-pw\n")
    vault = VaultLib([("default", VaultSecret(b"vault-pw"))])
    vault_file = tmp_path / "registry.yml"
    vault_file.write_bytes(vault.encrypt(f"registry_user: {USER}\nregistry_password: '{SECRET}'\n".encode()))
    reference = f"{pushed['repository']}:{_target().tag}"
    bench.client.images.get(_target().reference).tag(pushed["repository"], _target().tag)
    result = bench.cli(
        "push", reference, "--vault-file", str(vault_file), "--vault-password-file", str(password_file)
    )
    assert result.returncode == 0, _fail_with(result)
    assert f"pushed {reference}" in result.stdout


def test_credentials_in_a_mirror_url_are_refused(bench: Bench) -> None:
    result = bench.cli(
        "build", *_build_flags(bench), "--pip-index-url", f"http://{USER}:{SECRET}@127.0.0.1:1/s/"
    )
    assert result.returncode == 2 and "docker history" in result.stderr, _fail_with(result)


def test_planted_secret_appears_nowhere(bench: Bench, pushed: dict[str, Any], built: dict[str, Any]) -> None:
    """Outputs, run records, HOME (no docker config written), image history, labels and env: no secret."""
    haystack = list(bench.outputs)
    files = [p for p in [*bench.runs.rglob("*"), *bench.home.rglob("*")] if p.is_file()]
    assert any(p.name == "result.json" for p in files)
    haystack += [p.read_text(errors="replace") for p in files]
    assert not (bench.home / ".docker" / "config.json").exists()
    client = bench.client
    for reference in (_target().reference, f"{pushed['repository']}:{_target().tag}"):
        image = client.images.get(reference)
        haystack.append(json.dumps(client.api.history(image.id)))
        haystack.append(json.dumps(image.attrs))
    leaks = [
        text[max(0, text.find(SECRET) - 200) : text.find(SECRET) + 50] for text in haystack if SECRET in text
    ]
    assert not leaks, leaks


# ----------------------------------------------------------------------------------------- save / load


def test_save_and_load_for_air_gapped_sites(bench: Bench, built: dict[str, Any], tmp_path: Path) -> None:
    reference = _target().reference
    archive = tmp_path / "vllm-ascend.tar.gz"
    saved = bench.cli("save", "--output", str(archive))
    assert saved.returncode == 0, _fail_with(saved)
    assert saved.stdout.startswith(f"saved {reference} to {archive}")
    checksum = archive.with_name(archive.name + ".sha256")
    assert checksum.read_text().endswith(f"  {archive.name}\n")
    assert (
        subprocess.run(["sha256sum", "-c", checksum.name], cwd=tmp_path, capture_output=True).returncode == 0
    )
    client = bench.client
    image_id = client.images.get(reference).id
    client.images.remove(reference)  # other tags keep the layers; the reference itself is gone
    assert bench.cli("list", "--json").stdout.count('"state": "present"') == 0
    loaded = bench.cli("load", str(archive))
    assert loaded.returncode == 0, _fail_with(loaded)
    assert loaded.stdout.startswith(f"loaded {reference} from {archive} (checksum verified)")
    assert "vllm-ascend=0.23.0" in loaded.stdout and "cann=9.1.0" in loaded.stdout
    assert client.images.get(reference).id == image_id
    damaged = tmp_path / "damaged.tar.gz"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    damaged.with_name(damaged.name + ".sha256").write_text(checksum.read_text())
    refused = bench.cli("load", str(damaged))
    assert refused.returncode == 1 and "checksum mismatch" in refused.stderr, _fail_with(refused)


# ----------------------------------------------------------------------------------------- real engine


@pytest.mark.engine
def test_the_real_vllm_engine_behind_the_entrypoint_and_healthcheck(
    bench: Bench, built: dict[str, Any]
) -> None:
    """The entrypoint execs the real vLLM CPU server (FACTS.md §8) with the profile's arguments; Docker's
    health goes starting (loading: port refused, engine alive) → healthy (/health 200, model listed)."""
    from provision_sim.serving import vllm_cpu as engine

    engine.prepare()
    python = engine.engine_python()
    interpreter_home = python.resolve().parents[1]  # the base interpreter the venv points at
    port = testbed.free_port()
    cache = engine.cache_dir()
    container = bench.client.containers.run(
        _target().reference,
        [
            "--model",
            str(engine.model_dir()),
            "--served-model-name",
            "smollm2",
            "--max-model-len",
            "4096",
            "--dtype",
            "bfloat16",
            "--enforce-eager",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        detach=True,
        network_mode="host",
        user="0",  # the engine's venv and interpreter live under /root on this machine
        environment={
            "VLLM_PYTHON": str(python),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        },
        volumes={
            str(cache): {"bind": str(cache), "mode": "ro"},
            str(interpreter_home): {"bind": str(interpreter_home), "mode": "ro"},
        },
        healthcheck={"interval": 2 * 10**9, "timeout": 20 * 10**9, "retries": 3, "start_period": 600 * 10**9},
        shm_size="1g",
    )
    try:
        seen: list[str] = []
        started = time.monotonic()
        try:
            _wait_health(container, "healthy", timeout=400, seen=seen)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- engine ---\n{container.logs().decode()[-6000:]}") from None
        print(f"real engine in the image: healthy after {time.monotonic() - started:.1f} s")
        outputs = [line.split(" ", 1)[1] for line in seen]
        assert any(o.startswith("loading: ") for o in outputs), outputs
        assert outputs[-1] == f"ready: http://127.0.0.1:{port} serves smollm2", outputs
        logs = container.logs().decode()
        cmdline = container.exec_run(["cat", "/proc/1/cmdline"]).output.decode().split("\0")
        assert cmdline[:3] == [str(python), "-m", "vllm.entrypoints.openai.api_server"], cmdline
        import urllib.request

        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"model": "smollm2", "prompt": "Hello", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert json.load(answer)["choices"][0]["text"], logs[-2000:]
    finally:
        container.stop(timeout=20)
        container.remove(force=True)

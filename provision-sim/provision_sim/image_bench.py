"""An offline image-building bench on one machine, for the tests and ``benchmarks/image_rebuild.py``.

Everything a real air-gapped site has, made locally and started by us (and stopped by PID):

* :class:`Dockerd`: a private dockerd (Debian ``docker.io``) with its own data root, exec root and socket,
  ``--iptables=false --bridge=none`` (so RUN steps use ``--network host``), storage overlay2;
* :class:`Registry`: Debian's ``docker-registry`` on 127.0.0.1 with htpasswd (bcrypt) authentication;
* :class:`FileServer`: ``python -m http.server`` on 127.0.0.1 serving a pip index (``simple/<name>/``) and a
  flat apt repository (``apt/``) made from Debian packages;
* :func:`base_image`: a Debian bookworm rootfs (mmdebstrap, cached) imported ``FROM scratch`` + ``ADD``, the
  stand-in for the CANN base image that cannot be pulled here.

Cached downloads live in ``$PROVISION_IMAGE_TEST_CACHE`` (default ``/var/cache/provision-image-test``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from provision.errors import EnvironmentProblem, ProvisionError
from provision_sim.system import locked

CACHE_ENV = "PROVISION_IMAGE_TEST_CACHE"
DEFAULT_CACHE = Path("/var/cache/provision-image-test")
SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The base: python3 + pip like the CANN images; no jemalloc/numactl, so the build installs them from the
# local apt repository (the air-gapped path of container/install-os-packages.sh).
ROOTFS_PACKAGES = ("python3", "python3-pip")
APT_PACKAGES = ("libjemalloc2", "numactl", "libnuma1")
# A real, small package for the wheelhouse: PIP_PACKAGES replaces the lock's vllm/torch pins with it.
TEST_WHEEL = "six==1.16.0"
BASE_TAG = "provision-test/debian-python:bookworm"

Progress = Callable[[str], None]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise EnvironmentProblem(f"{tool} not found: apt-get install {package}")
    return path


def _wait(check: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = ""
    if log and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise ProvisionError(f"{what} did not come up within {timeout:.0f} s{tail}")


def _stop(popen: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM our own process, SIGKILL after ``timeout``."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            popen.wait(10)


# ----------------------------------------------------------------------------------------- dockerd


@dataclass
class Dockerd:
    """A private dockerd; ``url`` is its socket. Use as a context manager or call :meth:`stop`."""

    root: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> Path:
        return self.root / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def log_path(self) -> Path:
        return self.root / "dockerd.log"

    def start(self, timeout: float = 60.0) -> Dockerd:
        dockerd = _need("dockerd", "docker.io")
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [
            dockerd,
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.root / 'docker.pid'}",
            f"--host={self.url}",
            # Its containers use the host's network: nothing to forward, and the host's
            # net.ipv4.ip_forward (which dockerd sets to 1 by default) stays as it was.
            "--ip-forward=false",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--storage-driver=overlay2",
            "--log-level=warn",
        ]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait(self._answers, timeout, "dockerd", self.log_path)
        return self

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise ProvisionError(
                f"dockerd exited with {self.popen.returncode}:\n{self.log_path.read_text()[-3000:]}"
            )
        if not self.socket_path.exists():
            return False
        try:
            client = docker.DockerClient(base_url=self.url, timeout=5)
            client.ping()
            client.close()
        except docker.errors.DockerException:
            return False
        return True

    def client(self, timeout: int = 600) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, version="auto", timeout=timeout)

    def stop(self) -> None:
        """Remove our containers, SIGTERM dockerd (it stops its containerd), sweep what is left."""
        if self.popen is None:
            return
        with contextlib.suppress(docker.errors.DockerException):
            client = self.client(timeout=30)
            for container in client.containers.list(all=True):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
            client.close()
        containerd_pid = self._containerd_pid()
        _stop(self.popen, timeout=30)
        if containerd_pid is not None:  # dockerd's own containerd, if it outlived a killed dockerd
            with contextlib.suppress(ProcessLookupError):
                os.kill(containerd_pid, signal.SIGKILL)
        self.popen = None
        self._unmount()

    def _unmount(self) -> None:
        """Lazily unmount what dockerd left under our root (its netns file, a stray overlay)."""
        prefix = str(self.root.resolve()) + "/"
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            points = [line.split()[1] for line in fh if line.split()[1].startswith(prefix)]
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=False, capture_output=True)

    def _containerd_pid(self) -> int | None:
        pidfile = self.root / "exec" / "containerd" / "containerd.pid"
        try:
            return int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def __enter__(self) -> Dockerd:
        return self.start() if self.popen is None else self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------------------- registry


@dataclass
class Registry:
    """Debian's docker-registry on 127.0.0.1:<free port>, with htpasswd auth when ``user`` is set."""

    root: Path
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    port: int = 0
    popen: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "registry.log"

    def start(self, timeout: float = 30.0) -> Registry:
        binary = _need("docker-registry", "docker-registry")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        auth = ""
        if self.user and self.password:
            import bcrypt

            hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=6)).decode()
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text(f"{self.user}:{hashed.replace('$2b$', '$2y$', 1)}\n")
            htpasswd.chmod(0o600)
            auth = f"auth:\n  htpasswd:\n    realm: provision-test\n    path: {htpasswd}\n"
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n" + auth
        )
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [binary, "serve", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait(self._answers, timeout, "docker-registry", self.log_path)
        return self

    def _answers(self) -> bool:
        if self.popen is not None and self.popen.poll() is not None:
            raise ProvisionError(f"docker-registry exited:\n{self.log_path.read_text()[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def stop(self) -> None:
        if self.popen is not None:
            _stop(self.popen)
            self.popen = None

    def __enter__(self) -> Registry:
        return self.start() if self.popen is None else self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------------------- file server


@dataclass
class FileServer:
    """``python -m http.server`` bound to 127.0.0.1 over ``root`` (a pip index and an apt repository)."""

    root: Path
    port: int = 0
    popen: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> FileServer:
        self.port = self.port or free_port()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1"],
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def answers() -> bool:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
            return False

        _wait(answers, timeout, "http.server")
        return self

    def stop(self) -> None:
        if self.popen is not None:
            _stop(self.popen, timeout=5)
            self.popen = None

    def __enter__(self) -> FileServer:
        return self.start() if self.popen is None else self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


# ----------------------------------------------------------------------------------------- content


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def rootfs_tar(progress: Progress | None = None) -> Path:
    """The cached Debian rootfs tar (mmdebstrap minbase + python3 + pip, no docs), ≈ 50 s once."""
    say = progress or (lambda _text: None)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"rootfs-{SUITE}-{_digest(SUITE, *ROOTFS_PACKAGES)}.tar"
    with locked(cache / ".rootfs.lock"):
        if tarball.exists():
            return tarball
        mmdebstrap = _need("mmdebstrap", "mmdebstrap")
        say(f"building the test base rootfs with mmdebstrap (once, ≈ 50 s): {tarball}")
        partial = tarball.with_name(tarball.name + ".partial")
        argv = [
            mmdebstrap,
            "--quiet",
            "--variant=minbase",
            "--format=tar",
            f"--include={','.join(ROOTFS_PACKAGES)}",
            *(f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("doc", "man", "info", "locale")),
            SUITE,
            str(partial),
            os.environ.get("PROVISION_SIM_DEBIAN_MIRROR") or DEBIAN_MIRROR,
        ]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise ProvisionError(f"mmdebstrap failed ({result.returncode}):\n{result.stderr[-3000:]}")
        partial.rename(tarball)
    return tarball


def package_tree(extra_wheels: Sequence[str] = (), progress: Progress | None = None) -> Path:
    """The folder a :class:`FileServer` serves: ``simple/<project>/*.whl`` and ``apt/`` (``Packages``).

    Wheels come from PyPI (``pip download``), debs from Debian (``apt-get download``), once.
    """
    say = progress or (lambda _text: None)
    requirements = (TEST_WHEEL, *extra_wheels)
    root = cache_dir() / f"packages-{_digest(*requirements, *APT_PACKAGES)}"
    cache_dir().mkdir(parents=True, exist_ok=True)
    with locked(cache_dir() / ".packages.lock"):
        if (root / ".complete").exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        wheels = root / "wheels"
        wheels.mkdir(parents=True)
        say(f"downloading wheels {', '.join(requirements)}")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                "-d",
                str(wheels),
                *requirements,
            ],
            check=True,
        )
        simple = root / "simple"
        for wheel in sorted(wheels.glob("*.whl")):
            project = _normalize(wheel.name.split("-")[0])
            (simple / project).mkdir(parents=True, exist_ok=True)
            wheel.rename(simple / project / wheel.name)
        wheels.rmdir()
        apt = root / "apt"
        apt.mkdir()
        say(f"downloading debs {', '.join(APT_PACKAGES)}")
        subprocess.run(
            ["apt-get", "download", "-q", *APT_PACKAGES],
            cwd=apt,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        scan = subprocess.run(
            [_need("dpkg-scanpackages", "dpkg-dev"), "--multiversion", ".", "/dev/null"],
            cwd=apt,
            check=True,
            capture_output=True,
        )
        (apt / "Packages").write_bytes(scan.stdout)
        (root / ".complete").write_text("")
    return root


def _normalize(name: str) -> str:
    """PEP 503 project name."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def base_image(client: docker.DockerClient, progress: Progress | None = None, tag: str = BASE_TAG) -> str:
    """Import the cached rootfs as ``tag`` (``FROM scratch`` + ``ADD rootfs.tar /``) unless present."""
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(tag)
        return tag
    tarball = rootfs_tar(progress)
    dockerfile = b'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n'
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        tar.add(str(tarball), arcname="rootfs.tar")
    buffer.seek(0)
    for chunk in client.api.build(fileobj=buffer, custom_context=True, tag=tag, decode=True, rm=True):
        if "error" in chunk:
            raise ProvisionError(f"importing the test base image failed: {chunk['error']}")
    return tag


@dataclass
class Bench:
    """A started dockerd + file server + base image: build arguments for an offline build."""

    dockerd: Dockerd
    files: FileServer
    base: str

    def build_flags(self, pip_packages: str = TEST_WHEEL) -> list[str]:
        """``provision image build`` options for an offline build against this bench."""
        return [
            "--base-image",
            self.base,
            "--apt-source",
            f"deb [trusted=yes] {self.files.url}/apt ./",
            "--pip-index-url",
            f"{self.files.url}/simple/",
            "--pip-extra-index-url",
            "",
            "--pip-packages",
            pip_packages,
            "--network",
            "host",
        ]


# ----------------------------------------------------------------------------------------- scripted engine

# A stand-in for the engine's HTTP behaviour (not for vLLM itself), to drive the HEALTHCHECK through every
# state on demand: the state is read from ``<control>/state`` at each step.
#   loading  the port is not bound yet (the process lives)      ready  /health 200, model listed, completions
#   dead     /health 503                                        dead500  /health 500 (older vLLM)
#   empty    /health 200, /v1/models lists nothing              hang   requests never answer
#   exit     the process exits
SCRIPTED_ENGINE = r"""
import argparse, json, os, socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=8000)
parser.add_argument("--served-model-name", default="model")
parser.add_argument("--control", required=True)
args = parser.parse_args()

def state():
    try:
        with open(os.path.join(args.control, "state")) as fh:
            return fh.read().strip()
    except OSError:
        return "loading"

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def route(self):
        now = state()
        if now == "exit":
            os._exit(1)
        if now == "hang":
            time.sleep(120)
        if now in ("dead", "dead500"):
            return self.answer(503 if now == "dead" else 500, {"error": "engine dead"})
        if self.path == "/health":
            return self.answer(200, {})
        if self.path == "/v1/models":
            data = [] if now == "empty" else [{"id": args.served_model_name, "object": "model"}]
            return self.answer(200, {"object": "list", "data": data})
        if self.path == "/v1/completions":
            return self.answer(200, {"choices": [{"text": " world"}]})
        return self.answer(404, {})
    do_GET = route
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.route()

while state() == "loading":
    time.sleep(0.05)
if state() == "exit":
    sys.exit(1)
ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
"""


def write_scripted_engine(folder: Path) -> Path:
    """Write :data:`SCRIPTED_ENGINE` to ``folder/engine.py`` (readable by the image's non-root user)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    path = folder / "engine.py"
    path.write_text(SCRIPTED_ENGINE.lstrip())
    path.chmod(0o644)
    return path


def set_state(control: Path, state: str) -> None:
    """Switch a scripted engine's state (atomically; world-readable for the container's user)."""
    control.mkdir(parents=True, exist_ok=True)
    control.chmod(0o755)
    tmp = control / "state.tmp"
    tmp.write_text(state + "\n")
    tmp.chmod(0o644)
    tmp.replace(control / "state")

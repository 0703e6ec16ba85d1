"""Small host-side helpers for the simulator: commands, locks, processes we started, prerequisites."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from provision.errors import EnvironmentProblem, ProvisionError

# Debian packages that provide the host tools the simulator calls.
HOST_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "nsenter": "util-linux",
    "mount": "mount",
    "ip": "iproute2",
    "tar": "tar",
}


def require_host(*, need_mmdebstrap: bool = False) -> None:
    """Raise :class:`EnvironmentProblem` naming what to install when the simulator cannot run here."""
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "provision sim must run as root: it creates network namespaces, overlay mounts and "
            "systemd-nspawn containers (try sudo)"
        )
    tools = dict(HOST_TOOLS)
    if need_mmdebstrap:
        tools["mmdebstrap"] = "mmdebstrap"
    missing = sorted({package for tool, package in tools.items() if shutil.which(tool) is None})
    if missing:
        raise EnvironmentProblem(
            f"provision sim needs {', '.join(missing)}: apt-get install {' '.join(missing)}"
        )
    if "overlay" not in Path("/proc/filesystems").read_text():
        subprocess.run(["modprobe", "overlay"], capture_output=True, check=False)
        if "overlay" not in Path("/proc/filesystems").read_text():
            raise EnvironmentProblem("provision sim needs overlayfs in the kernel (modprobe overlay)")
    _raise_inotify_limit()


INOTIFY_INSTANCES = 1024
"""Each node's systemd, journald, udev and dbus hold inotify instances; they all count against root's
``fs.inotify.max_user_instances`` (kernel default 128). With ~20 nodes up, units with a directory watch
fail and boots stall ("degraded", no sshd). LXD and systemd-nspawn hosts raise it likewise."""


def _raise_inotify_limit() -> None:
    """Raise (never lower) the host's inotify instance limit to :data:`INOTIFY_INSTANCES`."""
    knob = Path("/proc/sys/fs/inotify/max_user_instances")
    try:
        if int(knob.read_text()) < INOTIFY_INSTANCES:
            knob.write_text(f"{INOTIFY_INSTANCES}\n")
    except (OSError, ValueError) as exc:
        raise EnvironmentProblem(
            f"provision sim needs fs.inotify.max_user_instances >= {INOTIFY_INSTANCES} "
            f"(sysctl -w fs.inotify.max_user_instances={INOTIFY_INSTANCES}): {exc}"
        ) from exc


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a host command; a failure raises :class:`ProvisionError` carrying its stderr."""
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise ProvisionError(f"{' '.join(argv)} failed (exit {result.returncode}): {result.stderr.strip()}")
    return result


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` for the duration of the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ProcessRef:
    """A process we started, named by PID *and* start time so a recycled PID is never signalled."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcessRef | None:
        stat = _stat(pid)
        return None if stat is None else cls(pid, int(stat[19]))

    @classmethod
    def parse(cls, text: str) -> ProcessRef | None:
        """Read the ``"<pid> <start>"`` form written by :meth:`dump`; ``None`` for anything else."""
        try:
            pid, start = (int(part) for part in text.split())
        except ValueError:
            return None
        return cls(pid, start)

    def dump(self) -> str:
        return f"{self.pid} {self.start}\n"

    def alive(self) -> bool:
        """Running (not a zombie) and still the same process."""
        stat = _stat(self.pid)
        return stat is not None and int(stat[19]) == self.start and stat[0] != "Z"

    def signal(self, signum: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def age(self) -> float:
        """Seconds since the process started (``0.0`` when it is gone)."""
        try:
            uptime = float(Path("/proc/uptime").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0.0
        return max(uptime - self.start / os.sysconf("SC_CLK_TCK"), 0.0) if self.alive() else 0.0

    def children(self) -> list[ProcessRef]:
        refs = []
        for task in Path(f"/proc/{self.pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for pid in task.read_text().split():
                    ref = ProcessRef.of(int(pid))
                    if ref is not None:
                        refs.append(ref)
        return refs

    def reap(self) -> None:
        """Collect the exit status if it is our own child, so it does not linger as a zombie."""
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)


def read_ref(path: Path) -> ProcessRef | None:
    try:
        return ProcessRef.parse(path.read_text())
    except FileNotFoundError:
        return None


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (index 0 is the state, 19 the start time)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def pids_in_netns(netns_path: Path) -> list[int]:
    """PIDs of every process whose network namespace is the one bound at ``netns_path``."""
    try:
        wanted = netns_path.stat().st_ino
    except FileNotFoundError:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "ns/net").stat().st_ino == wanted:
                    found.append(int(entry.name))
    return found

"""Keep one simulated node alive across reboots.

Usage: ``python -m provision_sim.supervisor NODE_DIR MACHINE -- systemd-nspawn ...``.

``systemd-nspawn --boot`` exits with status 133 when the node's systemd asks for a reboot
(``systemctl reboot``, Ansible's ``reboot`` module): the supervisor then boots it again, so the node really
goes through shutdown and a fresh boot (new boot id, /dev and /run recreated). Any other exit (poweroff,
crash) ends the supervisor and the node stays down.

SIGTERM (``provision sim down``) is passed on to systemd-nspawn, which asks the node's systemd for a clean
poweroff; the supervisor then exits instead of booting again.

Each boot starts in the node's own cgroups (``provision-sim/MACHINE``, see :mod:`provision_sim.cgroups`).

Files in NODE_DIR: ``nspawn.pid`` (``"<pid> <start time>"`` of the running systemd-nspawn, for ``down``)
and ``boots`` (how many times the node was started, counting on across power-offs).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from provision_sim import cgroups
from provision_sim.system import ProcessRef

REBOOT_EXIT_STATUS = 133


def supervise(node_dir: Path, machine: str, command: list[str]) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)

    pid_file = node_dir / "nspawn.pid"
    boots = _boots(node_dir)  # a node powered on again counts on
    status = 0
    while not stopping:
        cgroups.remove(machine)  # what the previous boot left, so each boot starts clean
        child = subprocess.Popen(command, preexec_fn=lambda: cgroups.join(machine))
        ref = ProcessRef.of(child.pid)
        if ref is not None:
            pid_file.write_text(ref.dump())
        boots += 1
        (node_dir / "boots").write_text(f"{boots}\n")
        if stopping:  # a signal arrived while we were starting it
            child.send_signal(signal.SIGTERM)
        status = child.wait()
        pid_file.unlink(missing_ok=True)
        _log(f"systemd-nspawn exited with status {status}")
        if status != REBOOT_EXIT_STATUS:
            break
        _log("node rebooting")
    return 0 if stopping else status


def _boots(node_dir: Path) -> int:
    try:
        return int((node_dir / "boots").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def _log(text: str) -> None:
    print(f"[provision-sim supervisor {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m provision_sim.supervisor NODE_DIR MACHINE -- COMMAND...", file=sys.stderr)
        return 2
    return supervise(Path(argv[0]), argv[1], argv[3:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Action plugin ``hccn_probe``: a node's NPU network ports (hccn_tool), listening ports and addresses in
ONE round trip.

It runs the read-only shell probe of :mod:`provision.ascend.hccn_gate` on the node and parses its output
HERE, on the controller, with :mod:`provision.ascend` (the one copy of each parser). The ``hccn_gate`` role
calls it twice per node: first the local checks (``devices``, ``ports``, ``addresses``), then the ping
matrix (``pings``) once every member's NPU addresses are known. The ``hccn_config`` role reads the ports'
address, gateway and detect address with it (``configs``) before and after it sets them.
Documentation: ``library/hccn_probe.py``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.ascend.hccl_check import (
    HCCL_TEST_DIRS,
    LOCATE_SCRIPT,
    LinkRun,
    link_figures,
    located,
    pair_argv,
)
from provision.ascend.hccn_gate import DEFAULT_TOOL, PROBE_SCRIPT, parse_probe, probe_argv

_ARGS = frozenset(
    {
        "tool",
        "devices",
        "configs",
        "pings",
        "pkt",
        "ports",
        "addresses",
        "resolve",
        "super_pods",
        "links",
        "link_port_gbps",
        "link_threshold",
        "hccl_test_dirs",
    }
)


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = _ARGS

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        if args.get("links"):
            host = str((task_vars or {}).get("inventory_hostname", ""))
            result.update(changed=False, **self._links(args, host))
            return result
        try:
            devices = [int(d) for d in args.get("devices") or []]
            pings = [(int(p["device"]), str(p["address"])) for p in args.get("pings") or []]
            argv = probe_argv(
                str(args.get("tool") or DEFAULT_TOOL),
                devices=devices,
                configs=[int(d) for d in args.get("configs") or []],
                pings=pings,
                pkt=int(args.get("pkt", 3)),
                ports=bool(args.get("ports", False)),
                addresses=bool(args.get("addresses", False)),
                resolve=[str(name) for name in args.get("resolve") or []],
                super_pods=bool(args.get("super_pods", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"hccn_probe: bad arguments: {exc}") from exc
        command = shlex.join(["sh", "-c", PROBE_SCRIPT, "hccn-probe", *argv])
        started = time.monotonic()
        done = self._low_level_execute_command(command, sudoable=True)
        seconds = round(time.monotonic() - started, 3)
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"HCCN probe failed (rc={done.get('rc')}): {done.get('stderr') or done.get('stdout')}"
            )
        probe = parse_probe(str(done.get("stdout", "")))
        result.update(changed=False, probe=probe, seconds=seconds)
        return result

    def _links(self, args: Mapping[str, Any], host: str) -> dict[str, Any]:
        """The pair tests of ``links`` (hccl_test, one at a time: they share the nodes' NPUs), each judged
        against ``link_threshold`` of ``link_port_gbps``; skipped, with why, where MPI or hccl_test is
        not installed."""
        try:
            links = [
                (int(p["device"]), str(p["peer"]), int(p["peer_device"]), [str(h) for h in p["hosts"]])
                for p in args["links"]
            ]
            gbps = float(args["link_port_gbps"]) if args.get("link_port_gbps") else None
            threshold = float(args.get("link_threshold", 0.5))
            dirs = [str(d) for d in args.get("hccl_test_dirs") or HCCL_TEST_DIRS]
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"hccn_probe: bad links: {exc}") from exc
        started = time.monotonic()
        found = self._low_level_execute_command(
            shlex.join(["sh", "-c", LOCATE_SCRIPT, "hccl-locate", *dirs]), sudoable=True
        )
        mpirun, folder = located(str(found.get("stdout", "")))
        if mpirun is None or folder is None:
            why = (
                "mpirun (MPICH) is not installed"
                if mpirun is None
                else f"hccl_test is not built (no bin/all_reduce_test in {', '.join(dirs)})"
            )
            return {"links": [], "links_skipped": why, "seconds": round(time.monotonic() - started, 3)}
        figures = []
        for device, peer, peer_device, hosts in links:
            if len(hosts) != 2:
                raise AnsibleActionFail(f"hccn_probe: a link needs two hosts, not {hosts}")
            done = self._low_level_execute_command(
                shlex.join(pair_argv(folder, (hosts[0], hosts[1]), device)), sudoable=True
            )
            output = str(done.get("stdout", "")) + str(done.get("stderr", ""))
            run = LinkRun(host, device, peer, peer_device, int(done.get("rc", 1)), output)
            figures.append(link_figures(run, gbps, threshold))
        return {"links": figures, "links_skipped": None, "seconds": round(time.monotonic() - started, 3)}

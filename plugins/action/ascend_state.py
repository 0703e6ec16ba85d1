"""Action plugin ``ascend_state``: what the ascend_driver and cann roles need to know of a node, in ONE task.

One read-only shell command over the existing connection (no module upload): the ``ascend_facts`` probe
(PCI view, ``npu-smi info``, ``version.info`` files, ``df``) when ``npus`` is true, provision's local facts
(``/etc/ansible/facts.d/<name>.fact``), sha1/mode/owner of given files and a ``find`` of install-info files.
With ``board`` a second command asks ``npu-smi info -t board -i <first NPU>`` (the loaded driver, the
flashed firmware) when npu-smi works. Everything is parsed here, on the controller; the roles decide with
their filters. Documentation: ``plugins/modules/ascend_state.py``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from provision.ascend.facts import PROBE_SCRIPT, SECTION_FUNCTION, facts_from_probe, sections

FACT_DIR = "/etc/ansible/facts.d"
# What Ansible's setup module stores for a .fact file it cannot read as JSON or INI.
FACT_ERROR = "error loading fact - please check content"
_FACT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def state_script(
    local_facts: Sequence[str] = (),
    stat_paths: Sequence[str] = (),
    find: Mapping[str, Any] | None = None,
) -> str:
    """The shell script printing the labelled sections ``fact <name>``, ``stat <path>`` and ``find``."""
    q = shlex.quote
    lines = [SECTION_FUNCTION]
    for name in local_facts:
        if not _FACT_NAME.match(name):
            raise ValueError(f"local fact names are letters, digits and _: {name!r}")
        path = f"{FACT_DIR}/{name}.fact"
        lines.append(f"if [ -f {q(path)} ]; then sec {q('fact ' + name)}; cat {q(path)}; fi")
    for path in stat_paths:
        lines.append(
            f"if [ -L {q(path)} ]; then :; elif [ -f {q(path)} ]; then sec {q('stat ' + path)};"
            f" stat -c '%a %U %G' {q(path)}; sha1sum < {q(path)};"
            f" elif [ -d {q(path)} ]; then sec {q('stat ' + path)}; echo \"$(stat -c '%a %U %G' {q(path)})"
            ' directory"; fi'
        )
    if find:
        names = [str(n) for n in find.get("names") or []]
        if not names:
            raise ValueError("find needs names")
        tests = " -o ".join(f"-name {q(n)}" for n in names)
        root = str(find["path"])
        depth = int(find.get("depth", 1))
        lines.append(
            f"sec find; if [ -d {q(root)} ]; then find {q(root)} -maxdepth {depth} -type f \\( {tests} \\)"
            " -print 2>/dev/null; fi"
        )
    lines.append("exit 0")
    return "\n".join(lines)


def parse_state(text: str) -> dict[str, Any]:
    """``{local: {name: fact}, stats: {path: {mode, owner, group, checksum}}, files: [{path}]}``.

    A folder's checksum is ``directory``; a symbolic link is left out like a missing path.
    """
    local: dict[str, Any] = {}
    stats: dict[str, dict[str, str]] = {}
    files: list[dict[str, str]] = []
    for label, body in dict(sections(text)).items():
        if label.startswith("fact "):
            try:
                local[label.removeprefix("fact ")] = json.loads(body)
            except ValueError:
                local[label.removeprefix("fact ")] = FACT_ERROR
        elif label.startswith("stat "):
            words = body.split()
            if len(words) >= 4:
                stats[label.removeprefix("stat ")] = {
                    "mode": words[0].zfill(4),
                    "owner": words[1],
                    "group": words[2],
                    "checksum": words[3],
                }
        elif label == "find":
            files = [{"path": p} for p in sorted(line.strip() for line in body.splitlines()) if p]
    return {"local": local, "stats": stats, "files": files}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"npus", "disk_paths", "board", "local_facts", "stat_paths", "find"})

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = self._task.args
        # Ansible's own reading of a boolean: a templated "{{ ... }}" may arrive as the string "False".
        npus = boolean(args.get("npus", True), strict=False)
        board = boolean(args.get("board", False), strict=False)
        paths = args.get("disk_paths") or ["/"]
        local_facts = args.get("local_facts") or []
        stat_paths = [p for p in args.get("stat_paths") or [] if p]
        find = args.get("find")
        for name, value in (("disk_paths", paths), ("local_facts", local_facts), ("stat_paths", stat_paths)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise AnsibleActionFail(f"{name} must be a list of strings")
        if find is not None and (not isinstance(find, Mapping) or "path" not in find):
            raise AnsibleActionFail("find must be a dict with path, names and depth")
        try:
            own = state_script(local_facts, stat_paths, find)
        except ValueError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        parts = [shlex.join(["sh", "-c", own, "ascend-state"])]
        if npus:
            parts.insert(0, shlex.join(["sh", "-c", PROBE_SCRIPT, "ascend-probe", *paths]))
        text = self._run("; ".join(parts))
        try:
            state = parse_state(text)
            facts = facts_from_probe(text) if npus else {}
        except ValueError as exc:
            raise AnsibleActionFail(f"cannot read the node's state probe: {exc}") from exc
        board_stdout: str | None = None
        if board and facts:
            npu = facts["ascend_npus"]
            if npu["npu_smi"] and npu["npu_smi_error"] is None and npu["health"]:
                first = next(iter(npu["health"]))
                board_stdout = self._run(shlex.join([npu["npu_smi"], "info", "-t", "board", "-i", first]))
        result.update(changed=False, board_stdout=board_stdout, **state)
        if facts:
            result["ansible_facts"] = facts
        return result

    def _run(self, command: str) -> str:
        done = self._low_level_execute_command(command, sudoable=True)
        if done.get("rc", 1) != 0:
            raise AnsibleActionFail(
                f"node state probe failed (rc={done.get('rc')}): {done.get('stderr') or done.get('stdout')}"
            )
        return str(done.get("stdout", ""))

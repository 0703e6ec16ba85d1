"""The scripts that run on the nodes are files of provision/scripts/: each one is loaded by the module that
sends it, and what a command sends is the file's text (its lint directives aside)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from provision.ascend import facts, hccn_gate
from provision.bootstrap import discover, node
from provision.doctor import probe
from provision.runner import record
from provision.scripts import node_script
from provision.serving import preserve

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
SCRIPTS = ROOT / "provision" / "scripts"

# file -> what the product sends it as
SENT = {
    "ascend_probe.sh": facts.PROBE_SCRIPT,
    "hccn_probe.sh": hccn_gate.PROBE_SCRIPT,
    "doctor_holders.sh": probe.HOLDERS_SCRIPT,
    "preserve_probe.sh": preserve.PROBE_SCRIPT,
    "bootstrap_packages.sh": node.PACKAGES_SCRIPT,
    "bootstrap_user.sh": node.USER_SCRIPT,
    "bootstrap_authorized_key.sh": node.AUTHORIZED_KEY_SCRIPT,
    "bootstrap_sudoers.sh": node.SUDOERS_SCRIPT,
    "bootstrap_harden.sh": node.HARDEN_SCRIPT,
    "bootstrap_unharden.sh": node.UNHARDEN_SCRIPT,
    "record_observe.py": record.OBSERVE_SCRIPT,
    "record_write.py": record.WRITE_SCRIPT,
}


def node_files() -> list[str]:
    return sorted(p.name for p in SCRIPTS.iterdir() if p.suffix in (".sh", ".py") and p.name != "__init__.py")


def test_every_script_file_is_sent_by_the_product() -> None:
    assert node_files() == sorted([*SENT, "bootstrap_discover.sh", "doctor_probe.sh"])
    product = [p for folder in ("provision", "plugins") for p in (ROOT / folder).rglob("*.py")]
    code = "\n".join(p.read_text(encoding="utf-8") for p in product if p.parent != SCRIPTS)
    loaded = set(re.findall(r'node_script\(\s*"([^"]+)"', code))
    assert [name for name in node_files() if name not in loaded] == []


@pytest.mark.parametrize("name", sorted(SENT))
def test_a_script_sent_is_its_file_without_lint_directives(name: str) -> None:
    lines = [
        line
        for line in (SCRIPTS / name).read_text(encoding="utf-8").strip().splitlines()
        if not line.lstrip().startswith("# shellcheck ")
    ]
    assert SENT[name] == "\n".join(lines)
    assert "# shellcheck" not in SENT[name]


def test_composed_scripts_are_their_files_in_order() -> None:
    assert node_script("bootstrap_discover.sh") + "\n" + facts.PROBE_SCRIPT == discover.DISCOVERY_SCRIPT
    # every probe prints its sections with the one function the controller parses them by
    for script in (facts.PROBE_SCRIPT, probe.HOLDERS_SCRIPT, probe.DOCTOR_SCRIPT, preserve.PROBE_SCRIPT):
        assert script.startswith(facts.SECTION_FUNCTION + "\n")
    assert hccn_gate.PROBE_SCRIPT.startswith("T=$1; shift\n" + facts.SECTION_FUNCTION + "\n")


def test_the_doctor_probe_carries_the_controllers_paths() -> None:
    script = probe.DOCTOR_SCRIPT
    assert "@" + "FACT_DIR@" not in script
    assert f"for f in {record.FACT_DIR}/*.fact;" in script
    assert f"[ -r {record.RECORD_PATH} ] && {{ sec record; cat {record.RECORD_PATH}; }}" in script
    assert f"n=${{1:-{probe.JOURNAL_LINES}}}" in script
    assert "systemctl show -p Id -p LoadState -p ActiveState" in script
    assert f"ls -t {probe.PLOG_DIR}/*.log" in script
    assert f"find {probe.DKMS_TREE} -mindepth 2" in script


def test_the_commands_send_the_scripts_verbatim() -> None:
    lexer = shlex.shlex(probe.probe_command([0, 1]), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    assert [words[i + 1] for i, w in enumerate(words) if w == "-c"] == [
        facts.PROBE_SCRIPT,
        probe.DOCTOR_SCRIPT,
        hccn_gate.PROBE_SCRIPT,
    ]
    assert shlex.split(probe.holders_command([7]))[2:] == [probe.HOLDERS_SCRIPT, "npu-holders", "7"]
    assert shlex.split(discover.discovery_command()) == ["sh", "-c", discover.DISCOVERY_SCRIPT, "sh"]
    observe = shlex.split(record.observe_command("/usr/bin/python3", keys=None))
    assert observe[:3] == ["/usr/bin/python3", "-c", record.OBSERVE_SCRIPT]
    write = shlex.split(record.write_command("/usr/bin/python3", {"a": 1}))
    assert write[:4] == ["/usr/bin/python3", "-c", record.WRITE_SCRIPT, record.RECORD_PATH]


def test_the_bootstrap_steps_send_their_scripts_to_the_node() -> None:
    sent: list[str] = []

    class Session:
        target = type("T", (), {"name": "n1"})()

        def root(self, script: str, args: object = (), *, timeout: float = 120) -> object:
            sent.append(script)
            return type("R", (), {"rc": 0, "out": "", "tail": lambda self: ""})()

    options = type(
        "O",
        (),
        {
            "deploy_user": "deploy",
            "deploy_key": type("K", (), {"public_line": "ssh-ed25519 AAAA", "public_blob": "AAAA"})(),
            "sudoers_file": "/etc/sudoers.d/90-provision-deploy",
            "sudoers_line": "deploy ALL=(ALL:ALL) NOPASSWD: ALL",
            "install_timeout": 900.0,
        },
    )()
    node._steps(Session(), options, lambda host, what: None, node.HostResult(target=None))
    assert sent == [
        node_script("bootstrap_packages.sh"),
        node_script("bootstrap_user.sh"),
        node_script("bootstrap_authorized_key.sh"),
        node_script("bootstrap_sudoers.sh"),
    ]


def test_a_placeholder_and_its_value_go_together() -> None:
    with pytest.raises(ValueError, match=r"doctor_probe.sh: placeholders \['DKMS_TREE'"):
        node_script("doctor_probe.sh")
    with pytest.raises(ValueError, match=r"values given for \['NOT_THERE'\]"):
        node_script("doctor_holders.sh", NOT_THERE="x")

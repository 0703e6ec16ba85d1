"""Discovery: the probe runs for real here (read-only), and its parser reads real NPU tool outputs."""

from __future__ import annotations

import platform
import subprocess

import pytest

from provision.bootstrap.discover import DISCOVERY_SCRIPT, parse_discovery
from tests.helpers import probe_section, sample

pytestmark = pytest.mark.unit


def test_probe_runs_here_and_is_parsed() -> None:
    out = subprocess.run(
        ["sh", "-c", DISCOVERY_SCRIPT, "probe"], capture_output=True, text=True, check=True
    ).stdout
    facts = parse_discovery(out)
    assert facts["arch"] == platform.machine()
    assert facts["kernel"] == platform.release()
    assert facts["os"]["id"]
    assert facts["cpu"]["count"] >= 1
    assert facts["memory_mb"] > 0
    assert facts["npus"] == {"count": 0, "model": None, "pci_ids": [], "bus_ids": []}
    assert facts["python"]["path"]
    assert all(nic["name"] != "lo" for nic in facts["nics"])


# /proc/cpuinfo of a Kunpeng 920 core: implementer 0x48 (HiSilicon), part 0xd01; an old lscpu printed no
# model name for it. The NPU part is the verbatim lspci output and version.info of an Atlas 800I A2.
KUNPENG_PROBE = (
    probe_section("uname", "aarch64\n5.10.0-136.12.0.86.oe2203sp1.aarch64\natlas-01")
    + probe_section(
        "os-release",
        'NAME="openEuler"\nVERSION="22.03 (LTS-SP1)"\nID="openEuler"\nVERSION_ID="22.03"\n'
        'PRETTY_NAME="openEuler 22.03 (LTS-SP1)"',
    )
    + probe_section(
        "lscpu",
        "Architecture:        aarch64\nCPU(s):              192\nSocket(s):           4\n"
        "Core(s) per socket:  48\nNUMA node(s):        8\nVendor ID:           HiSilicon\n"
        "Model:               0",
    )
    + probe_section(
        "cpuinfo",
        "192\nCPU implementer\t: 0x48\nCPU part\t: 0xd01",
    )
    + probe_section(
        "meminfo", "MemTotal:       1585418368 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB"
    )
    + probe_section(
        "lsblk",
        'NAME="sda" SIZE="960197124096" TYPE="disk" ROTA="0" MODEL="SAMSUNG MZ7L3960"\n'
        'NAME="sr0" SIZE="1073741312" TYPE="rom" ROTA="1" MODEL="Virtual CDROM"\n'
        'NAME="zram0" SIZE="8589934592" TYPE="disk" ROTA="0" MODEL=""',
    )
    + probe_section(
        "nics",
        "enp189s0f0|44:a1:91:00:00:01|up|1500|25000|hns3\nenp189s0f1|44:a1:91:00:00:02|down|1500||hns3",
    )
    + probe_section(
        "addresses",
        "2: enp189s0f0    inet 192.168.10.11/24 brd 192.168.10.255 scope global enp189s0f0\\"
        " valid_lft forever\n"
        "2: enp189s0f0    inet6 fe80::46a1:91ff:fe00:1/64 scope link \\ valid_lft forever",
    )
    + probe_section("python", "/usr/bin/python3\n3.9.9")
    + probe_section("pci", sample("lspci_d802.txt"))
    + probe_section(
        "file /usr/local/Ascend/driver/version.info", "Version=25.0.rc1.1\npackage_version=25.0.rc1.1"
    )
    + probe_section("file /usr/local/Ascend/firmware/version.info", "Version=7.7.0.1.231")
    + probe_section("df", "")
)


def test_kunpeng_node_with_eight_910b() -> None:
    facts = parse_discovery(KUNPENG_PROBE)
    assert facts["hostname"] == "atlas-01"
    assert facts["os"] == {
        "id": "openEuler",
        "name": "openEuler",
        "version": "22.03",
        "pretty_name": "openEuler 22.03 (LTS-SP1)",
    }
    assert facts["cpu"] == {
        "model": "Kunpeng-920",
        "vendor": "HiSilicon",
        "count": 192,
        "sockets": 4,
        "cores_per_socket": 48,
        "numa_nodes": 8,
    }
    assert facts["memory_mb"] == 1548260
    assert facts["disks"] == [
        {"name": "sda", "size_gb": 960, "model": "SAMSUNG MZ7L3960", "rotational": False}
    ]
    assert facts["nics"][0] == {
        "name": "enp189s0f0",
        "mac": "44:a1:91:00:00:01",
        "state": "up",
        "mtu": 1500,
        "speed_mbps": 25000,
        "driver": "hns3",
        "addresses": ["192.168.10.11/24"],
    }
    assert facts["nics"][1]["speed_mbps"] is None
    assert facts["npus"] == {
        "count": 8,
        "model": "910B",
        "pci_ids": ["19e5:d802"],
        "bus_ids": [
            "0000:01:00.0",
            "0000:02:00.0",
            "0000:41:00.0",
            "0000:42:00.0",
            "0000:81:00.0",
            "0000:82:00.0",
            "0000:c1:00.0",
            "0000:c2:00.0",
        ],
    }
    assert facts["npu_driver"] == {
        "installed": True,
        "driver_version": "25.0.rc1.1",
        "firmware_version": "7.7.0.1.231",
        "npu_smi": None,
    }
    assert facts["python"] == {"path": "/usr/bin/python3", "version": "3.9.9"}


def test_lscpu_model_name_wins() -> None:
    probe = KUNPENG_PROBE.replace("Model:               0", "Model name:          Kunpeng-920")
    assert parse_discovery(probe)["cpu"]["model"] == "Kunpeng-920"
    other = KUNPENG_PROBE.replace("0xd01", "0xd02")
    assert parse_discovery(other)["cpu"]["model"] is None

"""Robustness of the npu-smi parsers: layouts that differ from the samples the way real drivers do."""

from __future__ import annotations

import re

import pytest

from provision.ascend import (
    KeyValues,
    NpuSmiInfo,
    ParseError,
    parse_npu_smi_board,
    parse_npu_smi_chip_map,
    parse_npu_smi_health,
    parse_npu_smi_info,
    parse_npu_smi_list,
    parse_npu_smi_power,
    parse_npu_smi_topo,
)
from provision.errors import ProvisionError
from tests import helpers

pytestmark = pytest.mark.unit


def sample(name: str) -> str:
    """A single-output sample file without its ``#`` comment lines, ending in a newline."""
    return helpers.sample(name) + "\n"


B3 = sample("npu_smi_info_910b3_8npu.txt")
B4 = sample("npu_smi_info_910b4_8npu_idle_full.txt")


def repad(text: str, pad: str) -> str:
    """Re-pad every ``|`` row: cells joined with ``pad``, runs of spaces inside cells → ``pad``."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("|"):
            cells = [re.sub(r" {2,}", pad, c.strip()) for c in s.strip("|").split("|")]
            out.append("|" + "|".join(f"{pad}{c}{pad}" for c in cells) + "|")
        elif s.startswith("+"):
            out.append(s[:20] + "+")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def test_sample_equals_itself_with_narrow_columns() -> None:
    assert parse_npu_smi_info(repad(B3, " ")) == parse_npu_smi_info(B3)


def test_sample_equals_itself_with_wide_columns_and_tabs() -> None:
    assert parse_npu_smi_info(repad(B4, "\t    ")) == parse_npu_smi_info(B4)


def test_trailing_spaces_crlf_blank_lines_and_indentation() -> None:
    messy = "\r\n".join("    " + line + "   " for line in B3.splitlines()) + "\r\n\r\n"
    messy = messy.replace("|\r\n    | 0   ", "|\r\n\r\n    | 0   ", 1)
    assert parse_npu_smi_info(messy) == parse_npu_smi_info(B3)


def test_na_and_dash_values_become_none() -> None:
    text = B3.replace("| 101.8       43 ", "| NA          NA ").replace("| 92.0  ", "| -     ")
    info = parse_npu_smi_info(text)
    assert info.npu(0).power_w is None
    assert info.npu(0).temp_c is None
    assert info.npu(1).power_w is None
    assert info.npu(1).temp_c == 39
    assert info.npu(2).power_w == 102.0


def test_hbm_na_pair() -> None:
    info = parse_npu_smi_info(B3.replace("3318 / 65536", "NA / NA     "))
    assert (info.npu(0).hbm_used_mb, info.npu(0).hbm_total_mb) == (None, None)


def test_unhealthy_npu_is_reported() -> None:
    row5 = "| 5     910B3               | OK     "
    info = parse_npu_smi_info(B3.replace(row5, row5.replace("OK    ", "Alarm ")))
    assert not info.all_healthy
    assert [n.id for n in info.unhealthy] == [5]
    assert info.npu(5).health == "Alarm"


RUNNING = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.6                   Version: 23.0.6                                               |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 379.6       53                0    / 0             |
| 0                         | 0000:C1:00.0  | 87          0    / 0          62915/ 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 92.0        39                0    / 0             |
| 0                         | 0000:C2:00.0  | 0           0    / 0          3314 / 65536         |
+===========================+===============+====================================================+
| 2     910B3               | Warning       | NA          41                0    / 0             |
| 0                         | 0000:81:00.0  | 12          0    / 0          61000 / 65536        |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 3026126       | python3.9                | 59640                   |
| 0       0                 | 3026200       | VLLM::EngineCore         | 120                     |
+===========================+===============+====================================================+
| No running processes found in NPU 1                                                            |
+===========================+===============+====================================================+
| 2       0                 | 41                | ray::RayWorkerWrapper | 57500 |
+===========================+===============+====================================================+
"""


def test_process_table_with_running_processes() -> None:
    info = parse_npu_smi_info(RUNNING)
    assert info.version == "23.0.6"
    assert info.process_table
    assert info.busy_npu_ids == (0, 2)
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 0, 3026126, "python3.9", 59640),
        (0, 0, 3026200, "VLLM::EngineCore", 120),
        (2, 0, 41, "ray::RayWorkerWrapper", 57500),
    ]
    n0 = info.npu(0)
    assert [p.pid for p in n0.processes] == [3026126, 3026200]
    assert (n0.power_w, n0.temp_c, n0.aicore_pct) == (379.6, 53, 87)
    assert (n0.hbm_used_mb, n0.hbm_total_mb) == (62915, 65536)
    assert info.npu(1).processes == ()
    n2 = info.npu(2)
    assert n2.power_w is None
    assert n2.health == "Warning"
    assert [p.name for p in n2.processes] == ["ray::RayWorkerWrapper"]
    assert not info.all_healthy


# 310P Duo style: "Chip Device" columns, no HBM column, one repeated NPU block per chip.
TABLE_310P = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 23.0.0                                   Version: 23.0.0                                       |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 8       310P3                 | OK              | NA           48                0     / 0             |
| 0       0                     | 0000:01:00.0    | 0            1414 / 44280                            |
+-------------------------------+-----------------+------------------------------------------------------+
| 8       310P3                 | OK              | NA           47                0     / 0             |
| 1       1                     | 0000:02:00.0    | 3            1415 / 44280                            |
+===============================+=================+======================================================+
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |
+===============================+=================+======================================================+
| 8       1                     | 2233            | python3                  | 1024                      |
+===============================+=================+======================================================+
"""


def test_multi_chip_table_without_hbm_column() -> None:
    info = parse_npu_smi_info(TABLE_310P)
    assert info.npu_ids == (8,)
    assert len(info.npus) == 2
    c0, c1 = info.npu(8, 0), info.npu(8, 1)
    assert (c0.name, c0.power_w, c0.temp_c, c0.chip_device) == ("310P3", None, 48, 0)
    assert (c0.memory_used_mb, c0.memory_total_mb) == (1414, 44280)
    assert (c0.hbm_used_mb, c0.hbm_total_mb) == (None, None)
    assert (c1.chip_id, c1.chip_device, c1.aicore_pct, c1.bus_id) == (1, 1, 3, "0000:02:00.0")
    assert c0.processes == ()
    assert [p.pid for p in c1.processes] == [2233]
    with pytest.raises(KeyError):
        info.npu(8, 2)


def test_table_without_version_header() -> None:
    body = "\n".join(B3.splitlines()[2:])
    info = parse_npu_smi_info(body)
    assert info.version is None
    assert len(info.npus) == 8


def test_header_only_table_has_no_npus() -> None:
    head = "\n".join(B3.splitlines()[:6])
    info = parse_npu_smi_info(head)
    assert info == NpuSmiInfo(version="24.1.rc1.b030", driver_version="24.1.rc1.b030", npus=())
    assert not info.all_healthy


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "npu-smi info"),
        ("hello world\n", "npu-smi info"),
        ("| a | b | c |\n| d | e | f |\n", "NPU-id Name"),
        ("| a | b |\n", "second is missing"),
        # A block whose second line is missing.
        ("\n".join(B3.splitlines()[:7] + B3.splitlines()[8:]), "second is missing"),
        # A value cell with a value too many.
        (B3.replace("| 99.8        40   ", "| 99.8  1   40     "), "expected 3 values"),
        (B3.replace("| 99.8 ", "| 9x.8 "), "Power"),
        (B3.replace("3314 / 65536", "3314 x 65536"), "expected 3 values"),
    ],
)
def test_bad_tables_raise_parse_error(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match):
        parse_npu_smi_info(text)


def test_parse_error_is_a_value_error_and_a_provision_error() -> None:
    with pytest.raises(ValueError):
        parse_npu_smi_info("garbage")
    assert issubclass(ParseError, ProvisionError)


def test_list_variant_with_product_name_and_a3_chip_count() -> None:
    text = """
            Total Count                    : 1

            NPU ID                         : 8
            Product Name                   : IT21PDDA01
            Serial Number                  : 033VNY10MB000071
            Chip Count                     : 1
"""
    lst = parse_npu_smi_list(text)
    assert lst.total_count == 1
    assert lst.npus[0].npu_id == 8
    assert lst.npus[0].product_name == "IT21PDDA01"
    assert lst.npus[0].serial_number == "033VNY10MB000071"
    a3 = parse_npu_smi_list("Total Count : 8\n\nNPU ID : 0\nChip Count : 2\n")
    assert a3.chip_total == 2
    with pytest.raises(ParseError, match="NPU ID"):
        parse_npu_smi_list("Chip Count : 1\n")


def test_chip_map_with_phy_id_column_and_tabs() -> None:
    text = (
        "NPU ID\tChip ID\tChip Logic ID\tChip Phy-ID\tChip Name\n"
        "0\t0\t0\t0\tAscend 910\n"
        "0    1    1    1    Ascend 910\n"
        "0    2    -    -    Mcu   \n"
    )
    rows = parse_npu_smi_chip_map(text)
    assert [(r.chip_id, r.chip_logic_id, r.chip_phy_id, r.chip_name) for r in rows] == [
        (0, 0, 0, "Ascend 910"),
        (1, 1, 1, "Ascend 910"),
        (2, None, None, "Mcu"),
    ]
    with pytest.raises(ParseError, match="columns"):
        parse_npu_smi_chip_map("NPU ID   Chip ID   Chip Logic ID   Chip Name\n0   0\n")


def test_key_values_tolerate_spacing_and_na() -> None:
    p = parse_npu_smi_power("NPU ID:0\nChip Count\t:\t1\n\n\tNPU Real-time Power(W) : NA   \nChip ID : 0")
    assert (p.npu_id, p.chip_id, p.power_w) == (0, 0, None)
    kv = KeyValues((("A b", "1"), ("a  B", "2")))
    assert kv.get("AB") == "1"
    assert kv.get_all("a b") == ("1", "2")


def test_health_with_error_codes() -> None:
    h = parse_npu_smi_health(
        "Health Status : Alarm\nError Code : 80E01801 80C98000\nError Information : node type=HBM\n"
    )
    assert not h.ok
    assert h.error_codes == ("80E01801", "80C98000")
    assert h.error_information == "node type=HBM"


def test_board_incompatible_firmware() -> None:
    b = parse_npu_smi_board("NPU ID : 0\nSoftware Version : 24.1.rc1\nCompatibility : NOK\n")
    assert b.compatible is False


def test_topo_with_other_link_types_and_no_affinity_column() -> None:
    text = (
        "        NPU0    NPU1    NPU2\n"
        "NPU0    X       PIX     SYS\n"
        "NPU1    PIX     X       SYS\n"
        "NPU2    SYS  SYS  X\n"
    )
    topo = parse_npu_smi_topo(text)
    assert topo.link(0, 1) == "PIX"
    assert topo.link(2, 0) == "SYS"
    assert topo.rows[0].cpu_affinity is None
    assert topo.link_types == frozenset({"PIX", "SYS"})
    with pytest.raises(ParseError, match="link columns"):
        parse_npu_smi_topo("NPU0 NPU1\nNPU0 X\n")

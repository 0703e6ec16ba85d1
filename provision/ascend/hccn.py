"""Parsers of ``hccn_tool`` output (``/usr/local/Ascend/driver/tools/hccn_tool -i N ... -g``).

Formats, each from real captures (``tests/fixtures/samples/hccn_tool_outputs.txt`` and
``hccn_tool_real_captures.txt``, sources in their README) and from the printf calls of Huawei's open-source
hccn_tool (hicann/driver ``src/custom/network/hccn/ascend910B/hccn_tool``)::

    -ip -g          ipaddr:10.0.0.10
                    netmask:255.255.255.0
    -link -g        link status: UP                      (or DOWN)
    -net_health -g  net health status: Success           (see NET_HEALTH_CODES)
    -netdetect -g   netdetect address: 11.12.165.1       (MindIE guide capture; the open-source tool
                                                          prints "netdetect addr: %s": both accepted)
    -gateway -g     default gateway:11.12.165.1, Iface:eth0   ("default gateway:%s, Iface:eth%d")
    -tls -g         dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](...), ...
    -fec -g         fec mode: rs FEC mode
    -link_stat -g   [device 0]link up count       : 2   (plus dated LINK UP / LINK DOWN records)
    -ping -g address 10.10.100.10 [pkt N]
                    device 0 PING 10.10.100.10          ("device %d PING %s" / "device %d PING6 %s")
                    recv seq=0,time=0.067000ms           (one line per reply)
                    recv time out seq=0                  (one line per lost packet)
                    3 packets transmitted, 3 received, 0.00% packet loss

Set commands and some getters end with ``Cmd executed successfully!``; the parsers ignore it. The ping
summary's "packet loss" reads "packets loss" in the HCCS ping of the same tool; both are accepted.
:func:`parse_hccn_ping` reports ``success`` only when the summary shows 0.00 % loss with at least one
reply (``100.00% packet loss`` is NOT success, even though it contains the substring). Without a summary
line but with ``recv time out seq`` lines the result is a failure; anything else raises
:class:`ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from provision.ascend.npu_smi import KeyValues, ParseError, split_key_value_lines

__all__ = [
    "NET_HEALTH_CODES",
    "HccnGateway",
    "HccnIp",
    "HccnLinkStat",
    "HccnNetHealth",
    "HccnPing",
    "HccnTls",
    "parse_hccn_fec",
    "parse_hccn_gateway",
    "parse_hccn_ip",
    "parse_hccn_key_values",
    "parse_hccn_link",
    "parse_hccn_link_stat",
    "parse_hccn_net_health",
    "parse_hccn_netdetect",
    "parse_hccn_ping",
    "parse_hccn_tls",
]

NET_HEALTH_CODES: dict[int, str] = {
    0: "Success",
    1: "Socket fail",
    2: "Receive timeout",
    3: "Unreachable",
    4: "Time exceeded",
    5: "Fault",
    6: "Init",
    7: "Thread error",
    8: "Detect ip set",
    9: "Unknown",
}
"""``hccn_tool -net_health -g`` status codes → status words (only ``Success`` is healthy)."""


def _find_line(text: str, pattern: re.Pattern[str], what: str) -> re.Match[str]:
    for line in text.splitlines():
        m = pattern.search(line)
        if m:
            return m
    got = text.strip().splitlines()[0] if text.strip() else "empty text"
    raise ParseError(f"expected '{what}' output like {pattern.pattern!r}, got {got!r}")


def parse_hccn_key_values(text: str, what: str = "hccn_tool -g") -> KeyValues:
    """Generic ``key:value`` / ``key : value`` lines (e.g. ``-optical -g``, ``-stat -g``).

    A heading line ending in a colon (``packet statistics:``) becomes a pair with an empty value.
    """
    return KeyValues(split_key_value_lines(text, what))


@dataclass(frozen=True, slots=True)
class HccnIp:
    """``hccn_tool -i N -ip -g``. Strings as printed (public samples are redacted, e.g. ``10.xx.xx.10``)."""

    ipaddr: str
    netmask: str | None


def parse_hccn_ip(text: str) -> HccnIp:
    """Parse ``-ip -g`` (``ipaddr:A.B.C.D`` and ``netmask:M.M.M.M`` lines)."""
    what = "hccn_tool -ip -g"
    ip = _find_line(text, re.compile(r"^\s*ipaddr\s*:\s*(\S+)\s*$", re.IGNORECASE), what).group(1)
    mask: str | None = None
    for line in text.splitlines():
        m = re.match(r"^\s*netmask\s*:\s*(\S+)\s*$", line, re.IGNORECASE)
        if m:
            mask = m.group(1)
            break
    return HccnIp(ipaddr=ip, netmask=mask)


def parse_hccn_link(text: str) -> str:
    """Parse ``-link -g`` (``link status: UP``) → ``"UP"`` or ``"DOWN"`` (upper-cased as printed)."""
    m = _find_line(text, re.compile(r"^\s*link status\s*:\s*(\S+)", re.IGNORECASE), "hccn_tool -link -g")
    return m.group(1).upper()


@dataclass(frozen=True, slots=True)
class HccnNetHealth:
    """``-net_health -g``: ``status`` as printed; ``code`` from :data:`NET_HEALTH_CODES` (None if unknown)."""

    status: str
    code: int | None

    @property
    def ok(self) -> bool:
        return self.status.lower() == "success"


def parse_hccn_net_health(text: str) -> HccnNetHealth:
    """Parse ``-net_health -g`` (``net health status: Success``)."""
    m = _find_line(
        text, re.compile(r"^\s*net health status\s*:\s*(.+?)\s*$", re.IGNORECASE), "hccn_tool -net_health -g"
    )
    status = m.group(1)
    code = next((c for c, word in NET_HEALTH_CODES.items() if word.lower() == status.lower()), None)
    return HccnNetHealth(status=status, code=code)


def parse_hccn_netdetect(text: str) -> str:
    """Parse ``-netdetect -g`` (``netdetect address: A.B.C.D`` or ``netdetect addr: ...``) → the address."""
    m = _find_line(
        text,
        re.compile(r"^\s*netdetect addr(?:ess)?\s*:\s*(\S+)\s*$", re.IGNORECASE),
        "hccn_tool -netdetect -g",
    )
    return m.group(1)


@dataclass(frozen=True, slots=True)
class HccnGateway:
    """``-gateway -g``: ``default gateway:A.B.C.D, Iface:eth0`` (``ifname`` is the Iface value)."""

    gateway: str
    ifname: str | None


def parse_hccn_gateway(text: str) -> HccnGateway:
    """Parse ``-gateway -g``."""
    m = _find_line(
        text,
        re.compile(r"^\s*default gateway\s*:\s*([^,\s]+)\s*(?:,\s*Iface\s*:\s*(\S+))?\s*$", re.IGNORECASE),
        "hccn_tool -gateway -g",
    )
    return HccnGateway(gateway=m.group(1), ifname=m.group(2))


@dataclass(frozen=True, slots=True)
class HccnTls:
    """``-tls -g``: the ``dev_id:0, tls switch[0](...), ...`` line. ``fields`` holds every ``name[value]``."""

    dev_id: int
    enabled: bool
    preconfigured: bool | None
    alarm_threshold_days: int | None
    fields: tuple[tuple[str, str], ...]


def parse_hccn_tls(text: str) -> HccnTls:
    """Parse ``-tls -g`` (the line carrying ``tls switch[...]``; other lines are ignored)."""
    what = "hccn_tool -tls -g"
    m = _find_line(text, re.compile(r"dev_id\s*:\s*(\d+).*tls switch\s*\[", re.IGNORECASE), what)
    line = m.string
    fields = tuple(
        (name.strip().lower(), value.strip())
        for name, value in re.findall(r"([A-Za-z][A-Za-z _]*?)\s*\[([^\]]*)\]", line)
    )
    values = dict(fields)

    def num(name: str) -> int | None:
        v = values.get(name)
        if v is None or not v.strip().isdigit():
            return None
        return int(v)

    switch = num("tls switch")
    if switch is None:
        raise ParseError(f"expected 'tls switch[0|1]' in '{what}' output, got {line.strip()!r}")
    pre = num("tls preconfigured")
    return HccnTls(
        dev_id=int(m.group(1)),
        enabled=switch == 1,
        preconfigured=None if pre is None else pre == 1,
        alarm_threshold_days=num("tls alarm time threshold"),
        fields=fields,
    )


def parse_hccn_fec(text: str) -> str:
    """Parse ``-fec -g`` (``fec mode: rs FEC mode``) → the mode text."""
    m = _find_line(text, re.compile(r"^\s*fec mode\s*:\s*(.+?)\s*$", re.IGNORECASE), "hccn_tool -fec -g")
    return m.group(1)


@dataclass(frozen=True, slots=True)
class HccnLinkStat:
    """``-link_stat -g``: ``records`` are ``(timestamp text, "LINK UP" | "LINK DOWN")``, newest first."""

    device: int | None
    current_time: str | None
    link_up_count: int
    records: tuple[tuple[str, str], ...]


def parse_hccn_link_stat(text: str) -> HccnLinkStat:
    """Parse ``-link_stat -g`` (lines prefixed ``[device N]``)."""
    what = "hccn_tool -link_stat -g"
    device: int | None = None
    current: str | None = None
    count: int | None = None
    records: list[tuple[str, str]] = []
    for line in text.splitlines():
        m = re.match(r"^\s*\[device\s+(\d+)\]\s*(.*?)\s*$", line)
        if not m:
            continue
        device = int(m.group(1))
        body = m.group(2)
        key, found, value = body.partition(" : ")
        if not found:
            key, found, value = body.partition(":")
        k = key.strip().lower()
        if found and k == "current time":
            current = value.strip()
        elif found and k == "link up count":
            count = int(value.strip()) if value.strip().isdigit() else None
        else:
            rec = re.match(r"^(.*?)\s+(LINK\s+(?:UP|DOWN))$", body, re.IGNORECASE)
            if rec:
                records.append((rec.group(1).strip(), " ".join(rec.group(2).upper().split())))
    if count is None:
        raise ParseError(f"expected '[device N]link up count : N' in '{what}' output")
    return HccnLinkStat(device=device, current_time=current, link_up_count=count, records=tuple(records))


@dataclass(frozen=True, slots=True)
class HccnPing:
    """``-ping -g address A`` (format in the module docstring); ``device`` is the pinging NPU port."""

    success: bool
    transmitted: int | None
    received: int | None
    loss_pct: float | None
    timeouts: int
    target: str | None
    device: int | None = None


_PING_SUMMARY = re.compile(
    r"(\d+)\s+packets? transmitted,\s*(\d+)\s+(?:packets? )?received,"
    r"\s*(?:[^,]*,\s*)?([\d.]+)%\s+packets?\s+loss",
    re.IGNORECASE,
)
_PING_TIMEOUT = re.compile(r"recv time out seq", re.IGNORECASE)
_PING_HEADER = re.compile(r"^\s*device\s+(\d+)\s+PING6?\s+(\S+)\s*$", re.IGNORECASE)


def parse_hccn_ping(text: str) -> HccnPing:
    """Parse ``-ping -g``; ``success`` iff the summary shows 0.00 % loss and at least one reply."""
    summary = _PING_SUMMARY.search(text)
    timeouts = len(_PING_TIMEOUT.findall(text))
    header = next((m for m in map(_PING_HEADER.match, text.splitlines()) if m), None)
    device = int(header.group(1)) if header else None
    target = header.group(2) if header else None
    if summary is None:
        if timeouts:
            return HccnPing(False, None, None, None, timeouts, target, device)
        raise ParseError(
            "expected 'hccn_tool -ping -g' output with 'N packets transmitted, N received, X% packet loss'"
            " or 'recv time out seq' lines"
        )
    sent, got, loss = int(summary.group(1)), int(summary.group(2)), float(summary.group(3))
    return HccnPing(
        success=loss == 0.0 and got > 0,
        transmitted=sent,
        received=got,
        loss_pct=loss,
        timeouts=timeouts,
        target=target,
        device=device,
    )


# --------------------------------------------------------------------------------------------- hccl_test


@dataclass(frozen=True, slots=True)
class HcclTestRow:
    """One line of ``hccl_test``'s result table (``all_reduce_test`` and the other ``*_test`` binaries):
    the data size per NPU, the mean time, the algorithm bandwidth (data / time, GB/s as the tool's
    documentation says) and ``success``, ``failed`` or ``NULL`` (not checked)."""

    data_size: int
    avg_time_us: float
    alg_bandwidth_gbs: float
    check_result: str


_HCCL_TEST_HEADER = re.compile(
    r"^\s*data_size\(Bytes\):\s*\|\s*avg_time\(us\):\s*\|\s*alg_bandwidth\(GB/s\):"
)
_HCCL_TEST_ROW = re.compile(r"^\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*(\S+)\s*$")


def parse_hccl_test(text: str) -> list[HcclTestRow]:
    """The result table of ``hccl_test`` (format: tests/fixtures/samples/hccl_test_outputs.txt)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HCCL_TEST_HEADER.match(line)), None)
    if start is None:
        raise ParseError(
            "expected hccl_test's 'data_size(Bytes): | avg_time(us): | alg_bandwidth(GB/s):' table"
        )
    rows = []
    for line in lines[start + 1 :]:
        m = _HCCL_TEST_ROW.match(line)
        if m:
            rows.append(HcclTestRow(int(m.group(1)), float(m.group(2)), float(m.group(3)), m.group(4)))
    if not rows:
        raise ParseError("hccl_test printed its table header but no result line")
    return rows

"""``/usr/local/Ascend/driver/tools/hccn_tool``: the NPU network ports (RoCE) of a node.

Getters print the verbatim formats of ``tests/fixtures/samples/hccn_tool_outputs.txt`` and
``hccn_tool_real_captures.txt`` (netdetect, gateway, ping: real captures, sources in that folder's
README). Setters persist to ``/etc/hccn.conf`` (``address_N=``, ``netmask_N=``, ``netdetect_N=``,
``gateway_N=``), which then overrides ``hardware.json`` and survives a reboot as the real file does. As
Huawei's hccn_tool sources do (github.com/hicann/driver, ``src/custom/network/hccn/ascend910B/hccn_tool``:
``tool_ops.c`` ``is_ipaddr_conflict``, ``cfg.c``, ``cmd.c`` ``uda_handle_param_err`` and
``record_result_success_to_log``): a set prints ``Cmd executed successfully!``; a set rewrites its key
(the old line removed, the new one appended); an address another NPU of the host has, or one in
192.168.1.0/24 (the NPU's virtual NIC segment), is refused with ``The ip address configured is
conflicted!``; a gateway outside the segment of the port's address with ``The segment of configured
gateway doesn't match that of the configured ip adress!`` (sic); a gateway on a port with no address with
``Get ipconf failed, because no ip was preset there!`` (also ``-ip -g`` of a port with no address). Those
go to stderr (``TOOL_PRINT_ERR``). The TLS switch
(``-tls -s enable 0|1``, which prints ``Cmd executed successfully!`` as in the vendor guides) is device
state, kept in the simulator's ``state.json`` (it survives reboots), over the NPU's ``tls`` in hardware.json
(default 0).

``-ping -g address X [pkt N]`` REALLY sends ICMP echo requests (a raw ICMP socket, falling back to
an unprivileged ping socket), with the NPU port's address as source when that address is configured
on an interface (otherwise unbound). Where: in the "NPU fabric" network namespace when the node has
one — the file named by ``npu_netns`` in hardware.json (default ``/run/provision-sim/npu-netns``, a
bind mount of a netns file made by the cluster code), entered with setns(2) — else in the node's own
network namespace. ``-net_health -g`` probes the netdetect address the same way (one packet, 0.5 s).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from . import common

EXIT_OK = 0
EXIT_ERROR = 1
NOT_LOADED = "dcmi module initialize failed. ret is -8020\n"
NPU_NETNS = "/run/provision-sim/npu-netns"
CLONE_NEWNET = 0x40000000

USAGE = """Usage: hccn_tool -i <device_id> <command> -g|-s [<args>]
Commands: -ip -link -net_health -netdetect -gateway -tls -lldp -fec -link_stat -ping
"""


class HccnError(Exception):
    pass


class VendorError(HccnError):
    """An error the real tool prints on stderr, in its words (``TOOL_PRINT_ERR`` in cmd.c)."""


SET_OK = "Cmd executed successfully!\n"
IP_CONFLICT = "The ip address configured is conflicted!"
GATEWAY_SEGMENT = "The segment of configured gateway doesn't match that of the configured ip adress!"
NO_IP = "Get ipconf failed, because no ip was preset there!"
VNIC_SEGMENT = ("192.168.1.0", "255.255.255.0")


# ------------------------------------------------------------------------------------------------
# ICMP echo
# ------------------------------------------------------------------------------------------------


def enter_npu_netns(config: Mapping[str, Any]) -> bool:
    """Move this process into the NPU fabric's network namespace when the node has one."""
    path = common.host_path(str(config.get("npu_netns") or NPU_NETNS))
    if not path.exists():
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({common.node_path(path)}): {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return int(~s & 0xFFFF)


def _open_icmp(source: str | None) -> tuple[socket.socket, bool]:
    """(socket, raw?) bound to ``source`` when that address exists in this namespace."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        raw = True
    except PermissionError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
        raw = False
    if source:
        try:
            sock.bind((source, 0))
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                sock.close()
                raise
    return sock, raw


def icmp_echo(
    target: str, *, count: int = 3, timeout: float = 1.0, source: str | None = None
) -> list[float | None]:
    """Round-trip times in ms (None: lost) of ``count`` echo requests to ``target``."""
    sock, raw = _open_icmp(source)
    ident = os.getpid() & 0xFFFF
    results: list[float | None] = []
    try:
        for seq in range(count):
            payload = struct.pack("!d", time.time()) + b"provision-sim-hccn"
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
            start = time.monotonic()
            try:
                sock.sendto(packet, (target, 0))
            except OSError:
                results.append(None)
                time.sleep(min(timeout, 0.2))
                continue
            rtt: float | None = None
            deadline = start + timeout
            while rtt is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([sock], [], [], left)
                if not ready:
                    break
                data, addr = sock.recvfrom(2048)
                if raw:
                    data = data[(data[0] & 0x0F) * 4 :]
                if len(data) < 8 or addr[0] != target:
                    continue
                rtype, _, _, rid, rseq = struct.unpack("!BBHHH", data[:8])
                if rtype == 0 and rseq == seq and (rid == ident or not raw):
                    rtt = (time.monotonic() - start) * 1000.0
            results.append(rtt)
    finally:
        sock.close()
    return results


# ------------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------------


def read_conf() -> dict[str, str]:
    return common.read_key_equals(common.host_path(common.HCCN_CONF))


def update_conf(values: Mapping[str, str]) -> None:
    """Rewrite each key as cfg.c does: its old line removed, the new one appended."""
    conf = read_conf()
    for key, value in values.items():
        conf.pop(key, None)
        conf[key] = value
    common.write_key_equals(common.host_path(common.HCCN_CONF), conf)


def _ip(value: str) -> int:
    return int(struct.unpack("!I", socket.inet_aton(value))[0])


def _same_segment(a: str, b: str, mask: str) -> bool:
    return (_ip(a) & _ip(mask)) == (_ip(b) & _ip(mask))


class Port:
    """One NPU's network port: hardware.json values overridden by /etc/hccn.conf."""

    def __init__(self, config: Mapping[str, Any], npu: Mapping[str, Any]) -> None:
        self.config = config
        self.npu = npu
        self.id = int(npu["id"])
        self.conf = read_conf()

    def _get(self, key: str, default: Any) -> str | None:
        value = self.conf.get(f"{key}_{self.id}")
        if value:
            return value
        return None if default is None else str(default)

    @property
    def address(self) -> str | None:
        return self._get("address", self.npu.get("ip"))

    @property
    def netmask(self) -> str | None:
        return self._get("netmask", self.npu.get("netmask"))

    @property
    def gateway(self) -> str | None:
        return self._get("gateway", self.npu.get("gateway"))

    @property
    def netdetect(self) -> str | None:
        return self._get("netdetect", self.npu.get("netdetect"))

    @property
    def tls(self) -> int:
        stored = (common.load_state().get("tls") or {}).get(str(self.id))
        return int(stored if stored is not None else self.npu.get("tls", 0) or 0)

    @property
    def link_up(self) -> bool:
        down = common.faults(dict(self.config)).get("link_down") or []
        return self.id not in {int(x) for x in down}

    def net_health(self) -> str:
        forced = (common.faults(dict(self.config)).get("net_health") or {}).get(str(self.id))
        if forced:
            return str(forced)
        if not self.link_up:
            return "Fault"
        target = self.netdetect
        if not target:
            return "Init"
        try:
            enter_npu_netns(self.config)
            rtts = icmp_echo(target, count=1, timeout=0.5, source=self.address)
        except OSError:
            return "Socket fail"
        return "Success" if rtts and rtts[0] is not None else "Receive timeout"


# ------------------------------------------------------------------------------------------------
# commands
# ------------------------------------------------------------------------------------------------


def _pairs(args: Sequence[str], allowed: Sequence[str]) -> dict[str, str]:
    if len(args) % 2:
        raise HccnError(f"Error: parameter {args[-1]} requires a value.")
    out = {args[i]: args[i + 1] for i in range(0, len(args), 2)}
    unknown = set(out) - set(allowed)
    if unknown:
        raise HccnError(f"Error: invalid parameter {sorted(unknown)[0]}.")
    return out


def _valid_ip(value: str) -> bool:
    try:
        socket.inet_aton(value)
    except OSError:
        return False
    return value.count(".") == 3


def ping(port: Port, args: Sequence[str]) -> str:
    opts = _pairs(args, ("address", "pkt", "interval", "timeout"))
    target = opts.get("address")
    if not target or not _valid_ip(target):
        raise HccnError("Error: please input a valid address: -ping -g address A.B.C.D [pkt N]")
    count = int(opts.get("pkt", "3"))
    try:
        enter_npu_netns(port.config)
    except OSError as exc:
        raise HccnError(f"Error: the network of device {port.id} is not available ({exc}).") from None
    lines = [f"device {port.id} PING {target}"]
    if port.link_up:
        try:
            rtts = icmp_echo(target, count=count, timeout=1.0, source=port.address)
        except OSError:
            rtts = [None] * count
    else:
        rtts = [None] * count
    for seq, rtt in enumerate(rtts):
        if rtt is None:
            lines.append(f"recv time out seq={seq}")
        else:
            lines.append(f"recv seq={seq},time={rtt:.6f}ms")
    received = sum(1 for r in rtts if r is not None)
    loss = 100.0 * (count - received) / count if count else 100.0
    lines.append(f"{count} packets transmitted, {received} received, {loss:.2f}% packet loss")
    return "\n".join(lines) + "\n"


def getter(port: Port, cmd: str, rest: Sequence[str]) -> str:
    if cmd == "ip":
        if not port.address:
            raise VendorError(NO_IP)
        return f"ipaddr:{port.address}\nnetmask:{port.netmask or '255.255.255.0'}\n"
    if cmd == "link":
        return f"link status: {'UP' if port.link_up else 'DOWN'}\n"
    if cmd == "net_health":
        return f"net health status: {port.net_health()}\n"
    if cmd == "netdetect":
        return f"netdetect address: {port.netdetect or '0.0.0.0'}\n"
    if cmd == "gateway":
        return f"default gateway:{port.gateway or '0.0.0.0'}, Iface:eth{port.id}\n"
    if cmd == "tls":
        return (
            f"dev_id:{port.id}, tls switch[{port.tls}](0:disable, 1:enable), "
            "tls preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days\n"
        )
    if cmd == "fec":
        return "fec mode: rs FEC mode\n"
    if cmd == "lldp":
        if not port.link_up:
            return "lldp info is empty\n"
        node = port.config.get("node") or {}
        return (
            "Chassis ID TLV\n"
            f"\tMAC: {port.npu.get('switch_mac', '4c:f5:5b:00:00:01')}\n"
            "Port ID TLV\n"
            f"\tIfname: 200GE1/0/{int(node.get('index', 0)) * 8 + port.id + 1}\n"
            "Time to Live TLV\n"
            "\t121\n"
            "System Name TLV\n"
            "\tprovision-sim-switch\n"
            "End of LLDPDU TLV\n"
        )
    if cmd == "link_stat":
        return link_stat(port)
    if cmd == "ping":
        return ping(port, rest)
    raise HccnError(f"Error: invalid command -{cmd}.\n{USAGE}")


LINK_STAT_TIME = "%a %b %e %H:%M:%S %Y"
FLAP_DOWN_S = 2
"""How long a flapped port stays down (the link records of the MindCluster guide's capture: 2 s)."""


def link_stat(port: Port) -> str:
    """``-link_stat -g`` as the fixtures show it; the ``link_flap`` fault (NPU -> the epoch it went down)
    adds a LINK DOWN and the LINK UP FLAP_DOWN_S later, newest first, over the LINK UP of the node's boot."""
    p = f"[device {port.id}]"
    now = time.strftime(LINK_STAT_TIME)
    flap = (common.faults(dict(port.config)).get("link_flap") or {}).get(str(port.id))
    if flap is None or not port.link_up:
        state = "LINK UP" if port.link_up else "LINK DOWN"
        records = [(now, state)]
        count = 1 if port.link_up else 0
    else:
        flap_at = float(flap)
        try:
            boot = min(os.stat("/proc/1").st_mtime, flap_at - 60)
        except OSError:
            boot = flap_at - 60
        times = ((flap_at + FLAP_DOWN_S, "LINK UP"), (flap_at, "LINK DOWN"), (boot, "LINK UP"))
        records = [(time.strftime(LINK_STAT_TIME, time.localtime(t)), what) for t, what in times]
        count = 2
    return (
        f"{p}current time        : {now}\n"
        f"{p}link up count       : {count}\n"
        f"{p}link change records :\n" + "".join(f"{p}    {when}    {what}\n" for when, what in records)
    )


def setter(port: Port, cmd: str, rest: Sequence[str]) -> str:
    if cmd == "ip":
        opts = _pairs(rest, ("address", "netmask"))
        addr, mask = opts.get("address"), opts.get("netmask")
        if not addr or not mask or not _valid_ip(addr) or not _valid_ip(mask):
            raise HccnError("Error: please input: -ip -s address A.B.C.D netmask M.M.M.M")
        if _same_segment(addr, VNIC_SEGMENT[0], VNIC_SEGMENT[1]):
            raise VendorError(IP_CONFLICT)
        others = (Port(port.config, npu) for npu in port.config["npus"] if int(npu["id"]) != port.id)
        if any(other.address == addr for other in others):
            raise VendorError(IP_CONFLICT)
        update_conf({f"address_{port.id}": addr, f"netmask_{port.id}": mask})
        return SET_OK
    if cmd == "netdetect":
        opts = _pairs(rest, ("address",))
        addr = opts.get("address")
        if not addr or not _valid_ip(addr):
            raise HccnError("Error: please input: -netdetect -s address A.B.C.D")
        update_conf({f"netdetect_{port.id}": addr})
        return SET_OK
    if cmd == "gateway":
        opts = _pairs(rest, ("gateway",))
        gw = opts.get("gateway")
        if not gw or not _valid_ip(gw):
            raise HccnError("Error: please input: -gateway -s gateway A.B.C.D")
        if not port.address:
            raise VendorError(NO_IP)
        if not _same_segment(gw, port.address, port.netmask or "255.255.255.0"):
            raise VendorError(GATEWAY_SEGMENT)
        update_conf({f"gateway_{port.id}": gw})
        return SET_OK
    if cmd == "tls":
        opts = _pairs(rest, ("enable",))
        value = opts.get("enable")
        if value not in ("0", "1"):
            raise HccnError("Error: please input: -tls -s enable 0|1")
        state = common.load_state()
        state.setdefault("tls", {})[str(port.id)] = int(value)
        common.save_state(state)
        return "Cmd executed successfully!\n"
    raise HccnError(f"Error: the command -{cmd} does not support -s on this device.")


def run(argv: Sequence[str]) -> tuple[int, str]:
    """(exit code, stdout) of one call; a :class:`VendorError` is raised (its text goes to stderr)."""
    args = list(argv)
    if not args or args[0] in ("-h", "--help"):
        return (EXIT_OK if args else EXIT_ERROR), USAGE
    config = common.load_config()
    if config is None or common.loaded_driver() is None:
        return EXIT_ERROR, NOT_LOADED
    try:
        if len(args) < 4 or args[0] != "-i":
            raise HccnError(USAGE)
        dev = args[1]
        npu = next((n for n in config["npus"] if str(n["id"]) == dev), None)
        if npu is None:
            raise HccnError(f"Error: the device id {dev} is invalid.")
        cmd, mode, rest = args[2].lstrip("-"), args[3], args[4:]
        port = Port(config, npu)
        if mode == "-g":
            return EXIT_OK, getter(port, cmd, rest)
        if mode == "-s":
            return EXIT_OK, setter(port, cmd, rest)
        raise HccnError(USAGE)
    except VendorError:
        raise
    except HccnError as exc:
        return EXIT_ERROR, str(exc).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code, out = run(list(sys.argv[1:] if argv is None else argv))
    except VendorError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_ERROR
    sys.stdout.write(out)
    sys.stdout.flush()
    return code

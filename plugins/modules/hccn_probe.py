#!/usr/bin/python
"""Documentation of the ``hccn_probe`` action plugin (action_plugins/hccn_probe.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccn_probe
short_description: Probe a node's NPU network ports with hccn_tool, in one round trip
description:
  - Runs one read-only shell probe on the node and parses its output on the controller with
    C(provision.ascend.hccn_gate) (the parsers of C(provision.ascend.hccn)).
  - For each NPU of I(devices) it runs C(hccn_tool -i N -link -g), C(-net_health -g), C(-ip -g) and
    C(-tls -g), one background job per NPU. For each entry of I(pings) it runs
    C(hccn_tool -i N -ping -g address A pkt K), the pings of one NPU in turn, the NPUs in parallel.
  - With I(ports) it lists the listening TCP sockets (C(ss -Htlnp)) and the systemd unit of every process
    holding one (C(/proc/PID/cgroup)); with I(addresses) the node's IPv4 addresses (C(ip -o -4 addr)).
  - Changes nothing on the node; runs in check mode as well.
options:
  tool:
    description: Path of hccn_tool; looked up on PATH when not executable there.
    type: path
    default: /usr/local/Ascend/driver/tools/hccn_tool
  devices:
    description: NPU ids whose link, net health, address and TLS switch to read.
    type: list
    elements: int
  configs:
    description: NPU ids whose address, gateway and detect address to read (C(hccn_tool -i N -ip -g),
      C(-gateway -g), C(-netdetect -g)), one command at a time.
    type: list
    elements: int
  pings:
    description: Pings to send, C({device, address}) (other keys are ignored).
    type: list
    elements: dict
  pkt:
    description: Packets per ping.
    type: int
    default: 3
  ports:
    description: List the listening TCP sockets and their processes' units.
    type: bool
    default: false
  addresses:
    description: List the node's IPv4 addresses.
    type: bool
    default: false
  resolve:
    description: Host names to resolve on the node (C(getent ahostsv4)).
    type: list
    elements: str
  super_pods:
    description: Read the super pod ids of I(devices) too (C(npu-smi info -t spod-info -i NPU -c CHIP), the
      NPU and chip of each device from C(npu-smi info -m)); an Atlas A3's chips only, nothing elsewhere.
    type: bool
    default: false
  links:
    description:
      - "Pair tests to run instead of the probe, one at a time, C({device, peer, peer_device, hosts}):
        C(timeout 150 mpirun -hosts A,B -ppn 1 -n 2 -genv ASCEND_RT_VISIBLE_DEVICES device
        DIR/bin/all_reduce_test -b 8M -e 64M -f 2 -d fp32 -o sum -p 1) (hccl_test; see
        C(provision.ascend.hccl_check))."
      - Nothing runs, and C(links_skipped) says why, where mpirun or a built hccl_test is missing.
    type: list
    elements: dict
  link_port_gbps:
    description: Nominal speed of one NPU port (Gbit/s); unset, only failing pairs are refused.
    type: float
  link_threshold:
    description: Share of I(link_port_gbps) a pair must reach.
    type: float
    default: 0.5
  hccl_test_dirs:
    description: Where to look for hccl_test (its C(bin/all_reduce_test)), first found wins.
    type: list
    elements: path
    default: [/usr/local/Ascend/cann/tools/hccl_test, /usr/local/Ascend/ascend-toolkit/latest/tools/hccl_test]
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
author: provision (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Local checks of NPUs 0-7 and the ports in use
  provision.ascend.hccn_probe:
    devices: [0, 1, 2, 3, 4, 5, 6, 7]
    ports: true
    addresses: true

- name: Measure the link between NPU 3 of two nodes (hccl_test)
  provision.ascend.hccn_probe:
    links: [{device: 3, peer: atlas-a02, peer_device: 3, hosts: [192.0.2.11, 192.0.2.12]}]
    link_port_gbps: 200
    link_threshold: 0.5

- name: Ping a peer's NPU 5 from NPU 5
  provision.ascend.hccn_probe:
    pings: [{device: 5, address: 10.201.5.12}]
"""

RETURN = r"""
probe:
  description: What the probe found (see C(provision.ascend.hccn_gate.parse_probe)).
  returned: always
  type: dict
  contains:
    tool: {description: The hccn_tool used (null when missing)., type: str}
    tool_missing: {description: The path looked at when hccn_tool was not found., type: str}
    npus:
      description: "NPU id (string) -> link, net_health, ip, netmask, tls (0/1), errors; with super_pods on an
        A3, super_pod ({sdid, super_pod_id}) or super_pod_error."
      type: dict
    pings:
      description: "One per ping: device, address, success, loss_pct, transmitted, received, error."
      type: list
      elements: dict
    listeners:
      description: "Listening TCP sockets: address, port, processes (name, pid, unit); null unless ports."
      type: list
      elements: dict
    ports_error: {description: Why the ports could not be listed., type: str}
    addresses:
      description: "The node's IPv4 addresses: ifname, address, prefix."
      type: list
      elements: dict
    resolved: {description: Host name -> IPv4 address as the node resolves it., type: dict}
links:
  description: "With I(links): one per pair test: host, device, peer, peer_device, data_size, bandwidth_gbs
    (alg_bandwidth of the largest size), nominal_gbs, floor_gbs, ok, problem."
  returned: when links is given
  type: list
  elements: dict
links_skipped:
  description: Why no pair test ran (mpirun or hccl_test missing); null when they ran.
  returned: when links is given
  type: str
seconds:
  description: Wall time of the probe (one round trip).
  returned: always
  type: float
"""

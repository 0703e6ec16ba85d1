#!/usr/bin/python
"""Documentation of the ``doctor_probe`` action plugin (plugins/action/doctor_probe.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: doctor_probe
short_description: Read everything provision doctor needs of a node, changing nothing
description:
  - Runs one read-only shell command on the node over the existing connection (no module upload) and
    returns its output unparsed; C(provision doctor) parses it on the controller with provision's parsers.
  - Reads the PCI view, C(npu-smi info), the driver/firmware/CANN version files, free disk, the device
    nodes, C(hccn_tool) link, net health, address and TLS of every NPU, provision's local facts and
    converged record, C(/etc/docker/daemon.json), the state and journal tail of docker and of every
    C(vllm-*.service), the containers, C(dkms status) and the DKMS tree of the NPU driver, the newest
    engine plog, the up/down records of every NPU port (C(hccn_tool -link_stat -g)).
  - When C(npu-smi) lists processes on the NPUs, a second command reads their cgroups (which unit holds
    each NPU).
options:
  devices:
    description: NPU ids whose ports to ask C(hccn_tool) about (default 0 .. C(ascend_npu_count) - 1).
    type: list
    elements: int
  journal_lines:
    description: Journal lines per unit, and plog lines.
    type: int
    default: 40
  since_s:
    description:
      - Only the logs of this many last seconds (C(provision doctor --since)) - the journals, the kernel lines
        of the last hours (those of the boot stay), the plogs written in that window - and the NPU ports'
        link records of that window.
      - Default, the last journal lines, the kernel lines of the boot and of the last 6 hours, every plog.
    type: int
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
- name: Collect what provision doctor reads
  provision.ascend.doctor_probe:
    journal_lines: 60
  register: __doctor
"""

RETURN = r"""
probe:
  description: The labelled sections the node printed (C(provision.doctor.probe.collect) parses them).
  returned: always
  type: str
holders:
  description: The cgroup of each process npu-smi lists, as labelled sections (empty when none).
  returned: always
  type: str
"""

#!/usr/bin/python
"""Documentation of the ``ascend_facts`` action plugin (plugins/action/ascend_facts.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ascend_facts
short_description: Facts about a node's Ascend NPUs, driver, firmware and free disk space
description:
  - Runs one read-only probe on the node over the existing connection (no module upload) and parses it
    on the controller with provision's parsers.
  - NPUs come from the PCI view (vendor 0x19e5; device 0xd802 = 910B, 0xd803 = 910_93 (Atlas A3),
    0xd801 = 910, 0xd500 = 310P, 0xd100 = 310) through C(lspci -n -d 19e5:), or from
    /sys/bus/pci/devices when pciutils is missing.
  - When C(npu-smi) exists (PATH, /usr/local/bin, /usr/local/sbin), C(npu-smi info) gives per-NPU health,
    power, temperature and HBM use; versions come from /usr/local/Ascend/{driver,firmware}/version.info.
options:
  disk_paths:
    description: Paths whose free space to report (a missing path reports its nearest existing parent).
    type: list
    elements: str
    default: ["/"]
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
- name: Probe NPUs, drivers and disk space
  provision.ascend.ascend_facts:
    disk_paths: [/usr/local, /var]

- name: Refuse a node with an unhealthy NPU
  ansible.builtin.assert:
    that: ascend_npus.all_healthy
"""

RETURN = r"""
ansible_facts:
  description: Facts set on the host.
  returned: always
  type: dict
  contains:
    ascend_npus:
      description: count (NPU chips on the PCI bus, 16 on an Atlas A3), model (chip family, e.g. 910B,
        910_93), hardware_model (a2, a3, 300i-duo or null), line (the NPU line of the vendor's file
        and image names, 910b, a3, 310p or null), pci_device_ids, bus_ids, npu_smi (path or null),
        npu_smi_error, driver_version, firmware_version, driver_install_path, driver_install_status
        (C(Driver_Install_Status) of /etc/ascend_install.info, C(complete) once the driver installer
        finished, else null), health (chip logic id, the /dev/davinciN index, -> Health column; the NPU id
        where an NPU has one chip),
        all_healthy (null without npu-smi), chips (per chip id, name, health, bus_id, power_w, temp_c,
        hbm_used_mb, hbm_total_mb, aicore_pct, processes).
      type: dict
    ascend_disk_free_mb:
      description: Requested path -> free MiB.
      type: dict
"""

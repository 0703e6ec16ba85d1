#!/usr/bin/python
"""Documentation of the ``ascend_state`` action plugin (plugins/action/ascend_state.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ascend_state
short_description: A node's NPUs, running driver, provision's local facts and installed files, in one task
description:
  - Runs one read-only shell command on the node over the existing connection (no module upload) and
    parses its output on the controller; the ascend_driver and cann roles decide what a node needs from it.
  - With O(npus) (default), the same probe as M(provision.ascend.ascend_facts) and the same facts
    (C(ascend_npus), C(ascend_disk_free_mb)).
  - With O(board) and a working C(npu-smi), a second command C(npu-smi info -t board -i <first NPU>) whose
    output (the LOADED driver, the FLASHED firmware) is returned in RV(board_stdout).
  - Local facts are read from C(/etc/ansible/facts.d/<name>.fact) (JSON) and returned, not set as
    C(ansible_local); the roles compare them with what they would write.
options:
  npus:
    description: Probe the NPUs, installed driver/firmware and free disk (as
      M(provision.ascend.ascend_facts)).
    type: bool
    default: true
  disk_paths:
    description: With O(npus), paths whose free space to report.
    type: list
    elements: str
    default: ["/"]
  board:
    description: With O(npus), also ask npu-smi for the board information of the first NPU.
    type: bool
    default: false
  local_facts:
    description: Names of provision's local fact files to read (C(ascend) reads C(ascend.fact)).
    type: list
    elements: str
    default: []
  stat_paths:
    description: Regular files whose mode, owner, group and sha1 to report, or folders (checksum
      C(directory)); missing paths and symbolic links are left out.
    type: list
    elements: str
    default: []
  find:
    description: Regular files named one of C(names) under C(path), at most C(depth) levels deep (as
      M(ansible.builtin.find) with C(recurse) and C(depth)).
    type: dict
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
- name: Read the driver state in one task
  provision.ascend.ascend_state:
    board: true
    local_facts: [ascend]
  register: __probe

- name: Read the CANN install state
  provision.ascend.ascend_state:
    npus: false
    local_facts: [cann]
    stat_paths: [/etc/profile.d/ascend.sh]
    find:
      path: /usr/local/Ascend
      names: [ascend_toolkit_install.info, version.info]
      depth: 4
  register: __cann
"""

RETURN = r"""
local:
  description: Local fact name -> its JSON content (absent when the file does not exist).
  returned: always
  type: dict
stats:
  description: Path -> {mode ("0644"), owner, group, checksum (sha1)} of each existing O(stat_paths) file.
  returned: always
  type: dict
files:
  description: The files O(find) found, as [{path}], sorted.
  returned: always
  type: list
board_stdout:
  description: Output of C(npu-smi info -t board -i <first NPU>), or null when not asked or npu-smi failed.
  returned: always
  type: str
ansible_facts:
  description: With O(npus), C(ascend_npus) and C(ascend_disk_free_mb) as M(provision.ascend.ascend_facts)
    sets them.
  returned: when O(npus)
  type: dict
"""

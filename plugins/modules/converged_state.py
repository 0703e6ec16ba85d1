#!/usr/bin/python
"""Documentation of the ``converged_state`` action plugin (plugins/action/converged_state.py works)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: converged_state
short_description: Compare a node with the record of its last converged apply, or write that record
description:
  - Used by C(provision apply) (playbooks/converged.yml and playbooks/record.yml); see
    provision/converge/record.py for what a record watches and why.
  - Runs one read-only command on the node over the existing connection (no module upload), the same NPU
    probe as M(provision.ascend.ascend_facts), then a standard-library Python script that reads the record
    and observes the paths, units, packages, users and groups it watches, the running kernel and
    /etc/os-release.
  - Without O(write), returns RV(converged) and the reasons in RV(drift); changes nothing.
  - With O(write), observes the record's keys plus O(keys) and writes the record (mode 0600) atomically.
options:
  fingerprint:
    description: The digest of the run's inputs (inventory variables of the host, playbook, code).
    type: str
    required: true
  write:
    description: Write the record instead of comparing with it.
    type: bool
    default: false
  keys:
    description: With O(write), resources to watch besides those the record already watches.
    type: dict
  path:
    description: Where the record lives on the node.
    type: str
    default: /var/lib/provision/converged.json
  stack:
    description: Without O(write), the stack of the version lock the node's versions are reported against
      (its C(provision_stack)); empty for the lock's default.
    type: str
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
- name: Compare the node with its record
  provision.ascend.converged_state:
    fingerprint: "{{ __provision_fingerprints[inventory_hostname] }}"
  register: __converged
"""

RETURN = r"""
converged:
  description: The inputs are the same and every watched resource and the NPUs are as recorded.
  type: bool
  returned: without write
drift:
  description: "Why not, most telling first (C(no record ...), C(the inputs changed ...),
    C(/etc/x: sha1 ...))."
  type: list
  elements: str
  returned: without write
watched:
  description: How many paths, units, packages, users and groups the record watches.
  type: dict
  returned: always
written_at:
  description: When the record was written (UTC, ISO 8601).
  type: str
  returned: always
stack:
  description: The node's installed versions against the version lock (the filter
    C(provision.ascend.ascend_stack_report)'s value, its C(line) the sentence provision prints).
  type: dict
  returned: without write, when converged
provision_info:
  description: The stack report's C(line), printed by provision for the node.
  type: str
  returned: without write, when converged
"""

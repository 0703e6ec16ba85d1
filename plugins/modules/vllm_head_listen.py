#!/usr/bin/python
"""Documentation of the ``vllm_head_listen`` action plugin (plugins/action/vllm_head_listen.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_head_listen
short_description: Wait until a multi-node vLLM head listens on its data-parallel RPC port, or exits
description:
  - Run on the head of a multi-node serving group right after its unit was (re)started. Tries C(host:port)
    (the head's C(--data-parallel-address) and C(--data-parallel-rpc-port)) from the controller until it
    accepts a connection.
  - Stops early when the unit C(unit) no longer runs (C(systemctl show) over the connection, at most every
    C(alive_every_s)), since a head whose configuration is broken exits within seconds and would never open
    the port, so its workers need not wait C(timeout_s). The message then ends with the unit's journal.
  - Nothing on the node is changed. In check mode nothing is waited for.
options:
  unit:
    description: The head's systemd unit (vllm-<pool>.service).
    type: str
    required: true
  host:
    description: The head's data-parallel address.
    type: str
    required: true
  port:
    description: The head's data-parallel RPC port.
    type: int
    required: true
  timeout_s:
    description: Seconds to wait for the port while the unit runs.
    type: float
    default: 600
  poll_s:
    description: Seconds between two connection attempts.
    type: float
    default: 0.2
  alive_every_s:
    description: Ask systemd about the unit at most this often (an SSH round trip each).
    type: float
    default: 1
  log_lines:
    description: Journal lines appended to the message when the port did not open.
    type: int
    default: 20
  fail_when_not_listening:
    description: Fail the task when the port did not open.
    type: bool
    default: true
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
- name: Wait for the head of pool ds before its workers start
  provision.ascend.vllm_head_listen:
    unit: vllm-ds.service
    host: 10.0.0.11
    port: 13389
    fail_when_not_listening: false
  register: head
"""

RETURN = r"""
listening:
  description: True when the port accepted a connection; false when the unit stopped running or time ran out.
  returned: always
  type: bool
seconds:
  description: Seconds waited.
  returned: success
  type: float
msg:
  description: What was seen, with the unit's last journal lines when the port did not open.
  returned: always
  type: str
"""

#!/usr/bin/python
"""Documentation of the ``vllm_health`` action plugin (plugins/action/vllm_health.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Health gate of the node's vLLM instances (loading, ready, failed), from the controller
description:
  - For every pool of the node that names a serving profile (C(npu_pools_list), C(vllm_serve_profiles) and
    the shipped profiles), probes C(http://<ansible_host>:<pool port>) from the controller with
    provision's health gate (C(provision.serving.health)), the same code as C(provision serve status).
  - Ready means C(/health) 200, the served model listed by C(/v1/models), and a real completion answered.
    A refused port while the unit C(vllm-<pool>.service) is active/running means loading; the gate waits
    up to the load budget. Failed means C(/health) 5xx, a hung request, the unit not active/running (or
    its main process replaced by a restart), or the budget ran out; the message ends with the last lines
    of the unit's journal.
  - Liveness and the journal are read over the existing connection (C(systemctl show), C(journalctl)); no
    module is uploaded. Nothing on the node is changed.
  - In check mode the endpoints are probed once, without waiting, and the task never fails.
options:
  pools:
    description: Pools to check (names); default every pool of the node with a serving profile.
    type: list
    elements: str
  wait:
    description: Wait until ready or failed (the gate). False probes once (a status).
    type: bool
    default: true
  budget_s:
    description: Load budget in seconds. Default the profile's C(load_budget_s), else
      C(vllm_serve_load_budget_s), else 3600.
    type: float
  poll_s:
    description: Seconds between two probes while waiting.
    type: float
    default: 0.1
  settle_s:
    description: How long C(/v1/models) may stay empty after C(/health) 200 before it counts as failed.
    type: float
    default: 30
  completion_timeout_s:
    description: Seconds a completion may take before the engine counts as hung.
    type: float
    default: 30
  alive_every_s:
    description: Ask systemd about the unit at most this often while waiting (an SSH round trip each).
    type: float
    default: 1
  log_lines:
    description: Journal lines appended to the message of a failed instance.
    type: int
    default: 20
  host:
    description: Address the controller reaches the node on. Default C(ansible_host), else the inventory name.
    type: str
  api_key:
    description: Sent as C(Authorization Bearer). Default C(vllm_serve_api_key).
    type: str
  port:
    description: Probe this port instead of the pool's (one pool only; a rollback to a previous port).
    type: int
  model:
    description: Expect this served model name instead of the profile's (one pool only; a rollback).
    type: str
  fail_when_not_ready:
    description: Fail the task when an instance is not ready (after waiting, or on the single probe).
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
notes:
  - Pass C(no_log) on tasks that set C(api_key) explicitly; the key is never returned.
author: provision (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait until the chat pool answers (loads can take an hour for DeepSeek across two nodes)
  provision.ascend.vllm_health:
    pools: [chat]
    budget_s: 3600

- name: Report every instance once, without failing
  provision.ascend.vllm_health:
    wait: false
    port:
    description: Probe this port instead of the pool's (one pool only; a rollback to a previous port).
    type: int
  model:
    description: Expect this served model name instead of the profile's (one pool only; a rollback).
    type: str
  fail_when_not_ready: false
  register: serving
"""

RETURN = r"""
ready:
  description: True when every checked instance is ready.
  returned: always
  type: bool
endpoints:
  description: One entry per instance.
  returned: always
  type: list
  elements: dict
  contains:
    pool: {description: Pool name., type: str}
    unit: {description: "systemd unit, vllm-<pool>.service.", type: str}
    unit_state: {description: "ActiveState/SubState, main PID, restarts, result.", type: str}
    profile: {description: Serving profile name., type: str}
    url: {description: Endpoint probed., type: str}
    state: {description: "loading, ready, failed or unreachable.", type: str}
    ready: {description: True when ready., type: bool}
    model: {description: Served model name., type: str}
    reason: {description: Why this state., type: str}
    log_tail: {description: Last journal lines (failed only)., type: list, elements: str}
    message: {description: Reason followed by the log tail., type: str}
    seconds: {description: Seconds waited (or the probe's duration)., type: float}
    completion_s: {description: Seconds the last completion took., type: float}
    budget_s: {description: Load budget applied (null for a single probe)., type: float}
msg:
  description: >-
    One line per instance (with the log tail of failed ones); when the gate fails, a last line naming the
    C(provision doctor) command for the node.
  returned: always
  type: str
"""

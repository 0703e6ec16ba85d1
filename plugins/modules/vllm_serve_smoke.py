#!/usr/bin/python
"""Documentation of the ``vllm_serve_smoke`` action plugin (its plugins/action file does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_smoke
short_description: Smoke-test a vLLM instance right after its start, inside it, before its health gate
description:
  - Container mode, for an instance (re)started in this run (its unit's InvocationID differs from O(before)).
  - Inside the container (C(docker exec), in the image's C(/opt/provision/ascend-env.sh) with its engine's
    Python) C(python -c 'import torch, torch_npu; print(torch.npu.device_count())') must print the pool's
    NPU count.
  - The unit's journal since its main process started must say C(Platform plugin ascend is activated)
    (vLLM's line when it takes the vllm-ascend platform); without it, a C(No platform detected) line names the
    cause.
  - Polls every 2 s until both answered or O(timeout_s) ran out. A unit that is no longer active is left to
    the health gate (it says why and rolls a changed instance back). Service mode and check mode skip it,
    saying so.
options:
  unit:
    description: The instance's unit (vllm-<pool>.service).
    type: str
    required: true
  container:
    description: Its container (vllm-<pool>).
    type: str
  devices:
    description: The pool's NPU count.
    type: int
    required: true
  mode:
    description: vllm_serve_mode.
    type: str
    default: container
  engine:
    description: The container engine's CLI.
    type: str
    default: docker
  before:
    description: The unit's InvocationID before this run started anything (C(vllm_serve_preserve)'s);
      equal means not (re)started, nothing to test.
    type: str
  timeout_s:
    description: How long the instance may take to answer both.
    type: float
    default: 300
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
- name: Smoke-test the instance inside its container
  provision.ascend.vllm_serve_smoke:
    unit: vllm-chat.service
    container: vllm-chat
    devices: 8
    before: "{{ __vllm_serve_preserve.invocations['vllm-chat.service'] | default('') }}"
"""

RETURN = r"""
device_count:
  description: What torch.npu.device_count() printed inside the instance.
  returned: when tested
  type: int
plugin_line:
  description: The engine's log line that says the Ascend platform plugin is active.
  returned: when tested
  type: str
"""

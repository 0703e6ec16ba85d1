#!/usr/bin/python
"""Documentation of the ``vllm_serve_preserve`` action plugin (its plugins/action file does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_preserve
short_description: Check a node's NPUs, HBM and weights before the serving role starts any instance
description:
  - Runs one read-only command on the node over the existing connection (no module upload) and decides on
    the controller with C(provision.serving.preserve).
  - Per instance (served pool), each problem named with host, pool and NPU, and its fix.
  - Every NPU of the pool is in C(npu-smi info), healthy, and has its C(/dev/davinciN);
  - No process in npu-smi's process table holds it unless it is the pool's own instance (its unit, or its
    container's docker scope), and no other running container has it (C(--device) or
    C(ASCEND_VISIBLE_DEVICES)).
  - Per NPU, weights / (TP x PP) < gpu_memory_utilization x HBM total (the weights from
    C(model.safetensors.index.json)'s C(metadata.total_size), else the folder's size), and HBM free (plus
    what the pool's own running instance holds) >= gpu_memory_utilization x HBM total;
  - msModelSlim's C(quant_model_description.json) (its C(model_quant_type)) matches the profile's
    C(weights_quantization); none without the file.
  - Without npu-smi (no NPU driver) the NPU checks are skipped with a warning; a model folder not on the
    node yet skips its weight checks with a warning.
options:
  instances:
    description: The node's instances, as P(provision.ascend.vllm_serve_instances#filter) gives them.
    type: list
    elements: dict
    required: true
  profiles:
    description: The inventory's C(vllm_serve_profiles) (added to the shipped profiles).
    type: dict
    default: {}
  force:
    description: Report the problems as warnings and go on (C(vllm_serve_preserve_force)).
    type: bool
    default: false
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
- name: Refuse pools whose NPUs, HBM or weights are not ready, before any unit starts
  provision.ascend.vllm_serve_preserve:
    instances: "{{ __vllm_serve_instances }}"
    profiles: "{{ vllm_serve_profiles }}"
    force: "{{ vllm_serve_preserve_force }}"
  register: __vllm_serve_preserve
"""

RETURN = r"""
problems:
  description: One per refusal, with pool, npus, check (npu, foreign, hbm, quantization) and message.
  returned: always
  type: list
  elements: dict
notes:
  description: What could not be checked (no npu-smi; a model folder not on the node yet).
  returned: always
  type: list
  elements: str
invocations:
  description: systemd unit -> InvocationID of every installed vllm-*.service before this run started it
    (empty when stopped); the post-start smoke compares it to tell an instance (re)started in this run.
  returned: always
  type: dict
"""

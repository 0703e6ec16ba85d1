#!/usr/bin/python
"""Documentation of the ``vllm_bench_gate`` action plugin (plugins/action/vllm_bench_gate.py works)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_bench_gate
short_description: A short benchmark of the node's vLLM instances held against a baseline, from the controller
description:
  - For every single-node instance of the node (C(npu_pools_list) and the serving profiles; multi-node
    groups are not benchmarked), runs C(provision bench)'s load generator from the controller against
    C(http://<host>:<pool port>) - the fixed prompt, C(num_prompts) requests of C(fixed_output_len) tokens
    with C(ignore_eos), at most C(max_concurrency) in flight, after C(num_warmups) warm-ups - and compares
    the run with the baseline's run of the same C(base_url), C(max_concurrency) and C(request_rate) (inf)
    exactly as C(provision bench --baseline FILE --max-regression BOUND) does.
  - Fails when the output or request throughput fell, or the p99 TTFT rose, by more than C(max_regression)
    of the baseline's value, or when a request failed; the message names the regressed metrics, with the
    baseline's and this run's values.
  - The baseline is a C(provision bench INVENTORY --json) or C(--save-result) file on the controller, made
    with the same workload (C(--dataset-name fixed --fixed-output-len 16 --ignore-eos --num-prompts 8
    --max-concurrency 2 --num-warmups 1) for the defaults). A missing or bad file, or no run for one of the
    node's instances, fails before any request is sent.
  - Nothing on the node is changed.
options:
  baseline:
    description: The baseline file on the controller.
    type: path
    required: true
  max_regression:
    description: The bound, a percentage of the baseline's value from 0 to below 100 (C(10%) or C(10)).
    type: str
    default: 10%
  num_prompts:
    description: Requests in the run.
    type: int
    default: 8
  max_concurrency:
    description: Requests in flight at most.
    type: int
    default: 2
  fixed_output_len:
    description: Output tokens per request (C(ignore_eos)).
    type: int
    default: 16
  fixed_prompt:
    description: The prompt. Default C(provision bench)'s fixed prompt.
    type: str
  num_warmups:
    description: Warm-up requests before the run, not counted.
    type: int
    default: 1
  timeout_s:
    description: Seconds the run may take; requests still out then count as failed.
    type: float
    default: 600
  pools:
    description: Pools to benchmark (names); default every single-node pool of the node with a profile.
    type: list
    elements: str
  host:
    description: Address the controller reaches the node on. Default C(ansible_host), else the inventory name.
    type: str
  api_key:
    description: Sent as C(Authorization Bearer). Default C(vllm_serve_api_key).
    type: str
  check_only:
    description: Only check that the baseline can be read and has a run for each instance; send nothing.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Checks the baseline only, as with C(check_only).
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
author: provision (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Hold the chat pool to its baseline, 10 % at most
  provision.ascend.vllm_bench_gate:
    pools: [chat]
    baseline: /srv/provision/chat-baseline.json
    max_regression: 10%
"""

RETURN = r"""
runs:
  description: One entry per benchmarked instance.
  returned: always
  type: list
  elements: dict
  contains:
    pool: {description: Pool name., type: str}
    summary: {description: "The run's summary, C(provision bench --json)'s keys.", type: dict}
    regressed: {description: The result keys of the metrics beyond the bound., type: list, elements: str}
msg:
  description: >-
    Per instance, the verdict line of C(provision bench --baseline) (C(regression beyond 10% of FILE:
    METRICS (K of N compared))) and one line per metric (baseline, now, change, verdict).
  returned: always
  type: str
"""

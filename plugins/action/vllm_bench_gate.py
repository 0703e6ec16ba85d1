"""Action plugin ``vllm_bench_gate``: a short ``provision bench`` of the node's instances from the
controller, held against a baseline as ``provision bench --baseline FILE --max-regression 10%`` holds it.

The load generator is :func:`provision.bench.run.run_one` and the comparison is
:mod:`provision.bench.baseline` (the CLI's own code); this plugin only wires them to a node: the endpoint is
the node's address (``host``, else ``ansible_host``) and the pool's port, as the health gate and
``provision bench INVENTORY`` name it, so a baseline written by ``provision bench INVENTORY --json`` matches
by its ``base_url``. The workload is the fixed prompt with ``--ignore-eos``. Documentation:
``plugins/modules/vllm_bench_gate.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase

from provision.bench import baseline as gate
from provision.bench.client import Target, Unreachable
from provision.bench.datasets import DEFAULT_FIXED_PROMPT, fixed_requests
from provision.bench.run import Workload, run_one
from provision.errors import InputError
from provision.serving.plan import PoolPlan, pool_plans

SPEC: dict[str, dict[str, Any]] = {
    "baseline": {"type": "path", "required": True},
    "max_regression": {"type": "str", "default": "10%"},
    "num_prompts": {"type": "int", "default": 8},
    "max_concurrency": {"type": "int", "default": 2},
    "fixed_output_len": {"type": "int", "default": 16},
    "fixed_prompt": {"type": "str", "default": DEFAULT_FIXED_PROMPT},
    "num_warmups": {"type": "int", "default": 1},
    "timeout_s": {"type": "float", "default": 600.0},
    "pools": {"type": "list", "elements": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "check_only": {"type": "bool", "default": False},
}


def point(url: str, args: Mapping[str, Any]) -> gate.Point:
    """The point a baseline run of this gate is matched by: the URL, the concurrency, rate inf."""
    return url, int(args["max_concurrency"]), math.inf


def workload(args: Mapping[str, Any]) -> Workload:
    """``provision bench --dataset-name fixed --fixed-output-len N --ignore-eos --num-prompts N
    --max-concurrency C --num-warmups W --timeout S``."""
    count, output = int(args["num_prompts"]), int(args["fixed_output_len"])
    if count < 1 or int(args["max_concurrency"]) < 1:
        raise InputError("num_prompts and max_concurrency must be at least 1")
    return Workload(
        requests=fixed_requests(count, str(args["fixed_prompt"]), output, None),
        max_concurrency=int(args["max_concurrency"]),
        ignore_eos=True,
        num_warmups=int(args["num_warmups"]),
        timeout_s=float(args["timeout_s"]),
    )


def decide(
    previous: gate.Baseline, summary: Mapping[str, Any], failures: Sequence[str], bound: float, name: str
) -> tuple[bool, str, list[gate.Row]]:
    """(passed, message, rows) of one instance's run against its baseline run: it fails on a metric beyond
    the bound or on a failed request, as ``provision bench --baseline`` exits 1 on either."""
    rows = gate.compare(previous.run_for(gate.point_of(summary)), summary, bound)
    lines = [f"bench gate of {name}: {gate.verdict(rows, previous.path, bound)}"]
    lines += [f"  {gate.shown(row)}" for row in rows]
    if failures:
        first = sorted(set(failures))[0].strip().splitlines()
        lines.append(
            f"  {len(failures)} of {summary['num_prompts']} requests failed: {first[0] if first else '?'}"
        )
    return not gate.regressed(rows) and not failures, "\n".join(lines), rows


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(SPEC)

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        checked = ArgumentSpecValidator(SPEC).validate(dict(self._task.args))
        if checked.error_messages:
            raise AnsibleActionFail(f"vllm_bench_gate: {'; '.join(checked.error_messages)}")
        args = checked.validated_parameters

        def var(name: str, default: Any = None) -> Any:
            return self._templar.template(task_vars[name]) if name in task_vars else default

        try:
            bound = gate.parse_bound(str(args["max_regression"]), "vllm_serve_bench_gate.max_regression")
            previous = gate.load(Path(args["baseline"]))
            found = self._instances(args, var)
            host = str(args.get("host") or var("ansible_host") or var("inventory_hostname"))
            address = f"[{host}]" if ":" in host else host
            urls = {inst.pool: f"http://{address}:{inst.port}" for inst in found}
            for url in urls.values():  # every instance has its baseline before any request is sent
                previous.run_for(point(url, args))
            load = workload(args)
        except InputError as exc:
            raise AnsibleActionFail(f"vllm_serve_bench_gate: {exc}") from None
        result.update(changed=False, runs=[])
        if args["check_only"] or self._task.check_mode:
            result["msg"] = f"{len(urls)} instance(s) have their baseline in {previous.path}"
            return result
        api_key = args.get("api_key") or var("vllm_serve_api_key") or None
        messages: list[str] = []
        passed = True
        for inst in found:
            target = Target(urls[inst.pool], inst.served_model_name, api_key)
            try:
                run = run_one(target, load)
            except Unreachable as exc:
                raise AnsibleActionFail(f"bench gate of {inst.unit}: {exc}") from None
            ok, message, rows = decide(previous, run.summary, run.failures, bound, inst.unit)
            passed = passed and ok
            messages.append(message)
            result["runs"].append(
                {
                    "pool": inst.pool,
                    "summary": run.summary,
                    "regressed": [row.metric for row in gate.regressed(rows)],
                }
            )
        result["msg"] = "\n".join(messages)
        result["failed"] = not passed
        return result

    def _instances(self, args: Mapping[str, Any], var: Any) -> list[PoolPlan]:
        """The node's single-node instances of ``pools`` (all by default); multi-node groups are not
        benchmarked."""
        try:
            found = pool_plans(var("npu_pools_list") or [], var("vllm_serve_profiles") or {})
        except (InputError, ValueError) as exc:
            raise AnsibleActionFail(f"cannot work out the node's vLLM instances: {exc}") from exc
        wanted = args.get("pools")
        if wanted is not None:
            unknown = sorted(set(wanted) - {inst.pool for inst in found})
            if unknown:
                served = ", ".join(inst.pool for inst in found) or "none"
                missing = ", ".join(unknown)
                raise AnsibleActionFail(f"no served pool {missing} on this node (served: {served})")
            found = [inst for inst in found if inst.pool in wanted]
        return [inst for inst in found if inst.nodes == 1]

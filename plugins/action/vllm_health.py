"""Action plugin ``vllm_health``: the health gate of a node's vLLM instances, run from the controller.

The gate itself is :mod:`provision.serving.health` (one implementation for the role, the CLI and the
tests). This plugin only wires it to a node: the endpoint is the node's address (``ansible_host``) and the
pool's port; liveness is the systemd unit's state, asked over the existing connection (``systemctl
show``), and the log tail is the unit's journal. The pools and their served model names come from
``npu_pools_list`` and the serving profiles (:mod:`provision.serving.profiles`). Documentation:
``plugins/modules/vllm_health.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.errors import InputError
from provision.inventory.groups import serving_groups_of
from provision.inventory.schema import HOST_GROUP
from provision.serving import health
from provision.serving.health import Endpoint, Timeouts, Verdict
from provision.serving.multinode import group_dict, host_ranks
from provision.serving.plan import PoolPlan, pool_plans
from provision.systemd import UnitWatch, describe_unit

_ARGS: dict[str, type | tuple[type, ...]] = {
    "pools": (list, str),
    "wait": bool,
    "budget_s": (int, float),
    "poll_s": (int, float),
    "settle_s": (int, float),
    "completion_timeout_s": (int, float),
    "alive_every_s": (int, float),
    "log_lines": int,
    "host": str,
    "api_key": str,
    "fail_when_not_ready": bool,
    "port": int,
    "model": str,
}


def _place_fields(place: Mapping[str, Any] | None) -> dict[str, Any]:
    """``role`` (single, head or worker), and for a multi-node instance its ``head``, ``group``, ``hosts``."""
    if not place:
        return {"role": "single", "head": None, "group": None, "hosts": None}
    return {
        "role": str(place["role"]),
        "head": str(place["head"]),
        "group": str(place["group"]),
        "hosts": [str(h) for h in place["hosts"]],
    }


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible ships no type hints
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp: str | None = None, task_vars: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._checked_args()

        def var(name: str, default: Any = None) -> Any:
            if name not in task_vars:
                return default
            return self._templar.template(task_vars[name])

        try:
            found = pool_plans(var("npu_pools_list") or [], var("vllm_serve_profiles") or {})
        except (InputError, ValueError) as exc:
            raise AnsibleActionFail(f"cannot work out the node's vLLM instances: {exc}") from exc
        wanted = args.get("pools")
        if isinstance(wanted, str):
            wanted = [wanted]
        if ("port" in args or "model" in args) and (wanted is None or len(wanted) != 1):
            raise AnsibleActionFail("port and model override one instance: name exactly one pool in pools")
        if wanted is not None:
            unknown = sorted(set(wanted) - {inst.pool for inst in found})
            if unknown:
                served = ", ".join(inst.pool for inst in found) or "none"
                raise AnsibleActionFail(
                    f"no served pool {', '.join(unknown)} on this node (served: {served})"
                )
            found = [inst for inst in found if inst.pool in wanted]

        host = str(args.get("host") or var("ansible_host") or var("inventory_hostname"))
        api_key = args.get("api_key", var("vllm_serve_api_key")) or None
        check_mode = bool(self._task.check_mode)
        wait = bool(args.get("wait", True)) and not check_mode

        places = self._places(found, task_vars, var)
        endpoints = []
        for inst in found:
            place = places.get(inst.pool)
            if place and not health.serves_api(place["role"]):
                endpoints.append(self._worker(inst, place, api_key))
                continue
            item = self._gate(inst, host, api_key, args, var, wait=wait)
            endpoints.append({**item, **_place_fields(place)})
        ready = all(item["ready"] for item in endpoints if health.serves_api(item["role"]))
        result.update(changed=False, ready=ready, endpoints=endpoints)
        lines = [f"{item['pool']}: {item['state']} ({item['url']}): {item['message']}" for item in endpoints]
        result["msg"] = "\n".join(lines) if lines else "no pool with a serving profile on this node"
        if check_mode:
            result["msg"] = "check mode, probed once without waiting:\n" + result["msg"]
        elif not ready and args.get("fail_when_not_ready", True):
            result["failed"] = True
            node = var("inventory_hostname") or host
            result["msg"] += f"\n`provision doctor INVENTORY --limit {node}` names the cause and the fix."
        return result

    # ------------------------------------------------------------------------------------------ helpers

    def _checked_args(self) -> dict[str, Any]:
        args = dict(self._task.args)
        for name, kind in _ARGS.items():
            value = args.get(name)
            if value is None:
                continue
            if kind is bool:
                if isinstance(value, str):
                    args[name] = value.lower() in ("1", "true", "yes", "on")
                elif not isinstance(value, bool):
                    raise AnsibleActionFail(f"{name} must be true or false, not {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (kind, str)):
                raise AnsibleActionFail(f"{name} has the wrong type: {type(value).__name__}")
            elif isinstance(value, str) and kind in (int, (int, float)):
                try:
                    args[name] = int(value) if kind is int else float(value)
                except ValueError:
                    raise AnsibleActionFail(f"{name} must be a number, not {value!r}") from None
        return args

    def _places(
        self, found: list[PoolPlan], task_vars: Mapping[str, Any], var: Callable[[str, Any], Any]
    ) -> dict[str, Mapping[str, Any]]:
        """This node's place in the multi-node serving groups of ``found`` (pool -> head or worker): the
        HCCN gate's ``hccn_gate_ranks`` when this run has them, else worked out from the inventory as the
        gate does (``provision serve status``). Empty when no instance spans several nodes."""
        if not any(inst.nodes > 1 for inst in found):
            return {}
        ranks = var("hccn_gate_ranks", None)
        if isinstance(ranks, Mapping) and all(inst.pool in ranks for inst in found if inst.nodes > 1):
            return {str(k): v for k, v in ranks.items()}
        group = str(var("hccn_gate_inventory_group", None) or HOST_GROUP)
        hosts = list((task_vars.get("groups") or {}).get(group) or [])
        me = str(var("inventory_hostname", ""))
        try:
            groups = serving_groups_of(hosts, task_vars.get("hostvars") or {})
        except (InputError, ValueError) as exc:
            raise AnsibleActionFail(f"cannot work out the multi-node serving groups: {exc}") from exc
        return host_ranks([group_dict(g) for g in groups], me)

    def _worker(self, inst: PoolPlan, place: Mapping[str, Any], api_key: str | None) -> dict[str, Any]:
        """A headless worker serves no API: its row names its head (whose gate answers for the group) and
        the unit's state, without probing."""
        unit = UnitWatch(self._execute, inst.unit, every_s=0.0, track_pid=False)
        unit.refresh()
        unit_state = describe_unit(unit.state)
        reason = (
            f"worker of {place['head']}/{inst.pool} (serving group {place['group']}: "
            f"{', '.join(place['hosts'])}; its head's gate answers for it) [{inst.unit}: {unit_state}]"
        )
        return {
            "pool": inst.pool,
            "unit": inst.unit,
            "unit_state": unit_state,
            "profile": inst.profile,
            "budget_s": None,
            "api_key": bool(api_key),
            "url": "-",
            "state": health.WORKER,
            "ready": None,
            "model": inst.served_model_name,
            "reason": reason,
            "log_tail": [],
            "seconds": 0.0,
            "completion_s": None,
            "message": reason,
            **_place_fields(place),
        }

    def _execute(self, command: str) -> dict[str, Any]:
        done: dict[str, Any] = self._low_level_execute_command(command, sudoable=True)
        return done

    def _gate(
        self,
        inst: PoolPlan,
        host: str,
        api_key: str | None,
        args: Mapping[str, Any],
        var: Callable[[str, Any], Any],
        *,
        wait: bool,
    ) -> dict[str, Any]:
        address = f"[{host}]" if ":" in host else host
        port = int(args.get("port") or inst.port)
        model = str(args.get("model") or inst.served_model_name)
        endpoint = Endpoint(f"http://{address}:{port}", model=model, api_key=api_key)
        unit = UnitWatch(
            self._execute, inst.unit, every_s=float(args.get("alive_every_s", 1.0)), track_pid=wait
        )
        lines = int(args.get("log_lines", health.DEFAULT_LOG_LINES))
        timeouts = Timeouts(completion_s=float(args.get("completion_timeout_s", 30.0)))
        budget = float(
            args.get("budget_s")
            or inst.load_budget_s
            or var("vllm_serve_load_budget_s", None)
            or health.DEFAULT_LOAD_BUDGET_S
        )
        verdict: Verdict
        if wait:
            verdict = health.wait_ready(
                endpoint,
                alive=unit.alive,
                log=lambda: unit.journal(lines),
                budget_s=budget,
                poll_s=float(args.get("poll_s", health.DEFAULT_POLL_S)),
                settle_s=float(args.get("settle_s", health.DEFAULT_SETTLE_S)),
                timeouts=timeouts,
                log_lines=lines,
            )
        else:
            verdict = health.check(
                endpoint, alive=unit.alive, log=lambda: unit.journal(lines), timeouts=timeouts
            )
        unit.refresh()
        unit_state = describe_unit(unit.state)
        if not verdict.ready:
            verdict = replace(verdict, reason=f"{verdict.reason} [{inst.unit}: {unit_state}]")
        return {
            "pool": inst.pool,
            "unit": inst.unit,
            "unit_state": unit_state,
            "profile": inst.profile,
            "budget_s": budget if wait else None,
            "api_key": bool(api_key),
            **verdict.as_dict(),
            "message": verdict.message,
        }

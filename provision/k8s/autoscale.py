"""The autoscaling signals of a served pool, in one place: the Prometheus series, the PromQL queries, the
prometheus-adapter ``externalRules`` that serve them as External metrics, the HorizontalPodAutoscaler's
``metrics:`` and behaviour, and KEDA's prometheus triggers on the same queries.

Two signals, both per pool (the engines' and the exporter's series carry the labels ``namespace`` and
``pool``: the ServiceMonitor/PodMonitor rendered beside them put them there):

- **queue depth**: vLLM's ``vllm:num_requests_waiting`` (requests admitted but not yet scheduled), summed
  over the pool's engines; the HPA divides it by the current replicas (``AverageValue``), so the target is
  "waiting requests per replica". It rises the moment the engines are saturated, whatever the model or the
  hardware, and it is what production-stack and llm-d scale on.
- **NPU utilisation**: NPU-Exporter's ``npu_chip_info_utilization`` (percent of AI Core time), averaged over
  the pool's NPUs (``Value``). Busy NPUs do not say that clients wait; it is the seed's example and a
  second opinion, not the primary signal.

prometheus-adapter's External metrics API answers ``metricsQuery`` with ``<<.Series>>`` replaced by the
series and ``<<.LabelMatchers>>`` by the HPA's ``selector`` plus ``namespace`` (the rule's resources map the
``namespace`` label to the namespace resource). :func:`query` does that same substitution, so the test rig
and the docs evaluate exactly what the adapter would send to Prometheus.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

POOL_LABEL = "pool"
"""The series label naming the pool (as the monitoring role's targets carry it)."""
NAMESPACE_LABEL = "namespace"


@dataclass(frozen=True)
class Signal:
    """One autoscaling signal: the Prometheus series, the External metric the adapter serves it as, how
    the pool's series are combined, and how the HPA reads the result."""

    key: str
    """``queue`` or ``npu``: the name an option picks it by."""
    series: str
    metric: str
    """The External metric's name (no ``:``: the adapter renames the series)."""
    aggregation: str
    target_type: str
    """``AverageValue`` (divided by the replicas) or ``Value``."""
    default_target: float
    description: str


QUEUE = Signal(
    key="queue",
    series="vllm:num_requests_waiting",
    metric="provision_vllm_requests_waiting",
    aggregation="sum",
    target_type="AverageValue",
    default_target=5,
    description="requests waiting per replica (vLLM's queue)",
)
NPU = Signal(
    key="npu",
    series="npu_chip_info_utilization",
    metric="provision_npu_utilization",
    aggregation="avg",
    target_type="Value",
    default_target=80,
    description="mean AI Core utilisation of the pool's NPUs, percent (NPU-Exporter)",
)
SIGNALS: dict[str, Signal] = {signal.key: signal for signal in (QUEUE, NPU)}
DEFAULT_SIGNALS = ("queue",)
"""What a pool scales on unless told otherwise: the queue (see the module's docstring)."""

METRICS_QUERY = "{aggregation}(<<.Series>>{{<<.LabelMatchers>>}})"
"""The adapter's ``metricsQuery`` template for a signal (Go template delimiters ``<<`` ``>>``)."""

DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
"""Where KEDA's trigger asks by default: the Service prometheus-operator creates in ``monitoring``."""


def signals(keys: tuple[str, ...] | list[str] = DEFAULT_SIGNALS) -> list[Signal]:
    """The signals named by ``keys`` (``queue``, ``npu``), in that order; ValueError names an unknown one."""
    unknown = [key for key in keys if key not in SIGNALS]
    if unknown:
        raise ValueError(f"unknown autoscaling signal {unknown[0]!r}; known: {', '.join(SIGNALS)}")
    return [SIGNALS[key] for key in keys]


def matchers(pool: str, namespace: str) -> str:
    """The label matchers the adapter builds for a pool's HPA (namespace first, as it sorts them)."""
    return f'{NAMESPACE_LABEL}="{namespace}",{POOL_LABEL}="{pool}"'


def query(signal: Signal, pool: str, namespace: str) -> str:
    """The PromQL the adapter sends for ``signal`` of ``pool`` in ``namespace`` (and KEDA's trigger query)."""
    return (
        METRICS_QUERY.format(aggregation=signal.aggregation)
        .replace("<<.Series>>", signal.series)
        .replace("<<.LabelMatchers>>", matchers(pool, namespace))
    )


def adapter_rule(signal: Signal) -> dict[str, Any]:
    """One entry of prometheus-adapter's ``externalRules``."""
    return {
        "seriesQuery": f'{{__name__="{signal.series}",{NAMESPACE_LABEL}!="",{POOL_LABEL}!=""}}',
        "resources": {"overrides": {NAMESPACE_LABEL: {"resource": "namespace"}}},
        "name": {"matches": f"^{signal.series}$", "as": signal.metric},
        "metricsQuery": METRICS_QUERY.format(aggregation=signal.aggregation),
    }


def adapter_config(keys: tuple[str, ...] | list[str] = tuple(SIGNALS)) -> dict[str, Any]:
    """prometheus-adapter's configuration (its ``--config`` file) serving the signals as External metrics."""
    return {"externalRules": [adapter_rule(signal) for signal in signals(keys)]}


def _quantity(value: float) -> str:
    """A Kubernetes quantity for a target: whole numbers plain, fractions in milli-units."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def hpa_metric(signal: Signal, pool: str, target: float | None = None) -> dict[str, Any]:
    """One entry of an ``autoscaling/v2`` (and ``v2beta2``: same shape) HPA's ``metrics:``."""
    value = signal.default_target if target is None else target
    kind = "averageValue" if signal.target_type == "AverageValue" else "value"
    return {
        "type": "External",
        "external": {
            "metric": {"name": signal.metric, "selector": {"matchLabels": {POOL_LABEL: pool}}},
            "target": {"type": signal.target_type, kind: _quantity(value)},
        },
    }


def hpa_metrics(
    pool: str,
    keys: tuple[str, ...] | list[str] = DEFAULT_SIGNALS,
    targets: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """The HPA's ``metrics:`` for a pool (``targets``: a signal's key -> its target, else the default)."""
    given = targets or {}
    return [hpa_metric(signal, pool, given.get(signal.key)) for signal in signals(keys)]


def stabilization_s(budget_s: float) -> int:
    """Scale-down stabilisation for a pool: longer than one load (the budget) plus a minute, so a scale-up
    is never undone before the replica it added has finished loading. The HPA refuses more than 3600 s."""
    return min(int(budget_s) + 60, MAX_STABILIZATION_S)


MAX_STABILIZATION_S = 3600
"""The most ``stabilizationWindowSeconds`` the apiserver accepts."""


def behavior(budget_s: float) -> dict[str, Any]:
    """The HPA's ``behavior``: scale up at once, one replica at a time down after the stabilisation."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": stabilization_s(budget_s),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


def keda_trigger(
    signal: Signal, pool: str, namespace: str, target: float | None = None, server: str = DEFAULT_PROMETHEUS
) -> dict[str, Any]:
    """A KEDA ``prometheus`` trigger on the same query as the adapter's rule."""
    value = signal.default_target if target is None else target
    return {
        "type": "prometheus",
        "name": signal.metric,
        "metricType": signal.target_type,
        "metadata": {
            "serverAddress": server,
            "query": query(signal, pool, namespace),
            "threshold": _quantity(value) if float(value).is_integer() else str(value),
        },
    }


def keda_triggers(
    pool: str,
    namespace: str,
    keys: tuple[str, ...] | list[str] = DEFAULT_SIGNALS,
    targets: Mapping[str, float] | None = None,
    server: str = DEFAULT_PROMETHEUS,
) -> list[dict[str, Any]]:
    given = targets or {}
    return [keda_trigger(signal, pool, namespace, given.get(signal.key), server) for signal in signals(keys)]

"""The test rig's external metrics API (provision_sim.k8s.external_metrics) renders prometheus-adapter's
externalRules as the adapter does: the product's rendered rules give exactly the product's queries, the HPA's
label selectors become PromQL matchers, and a rule the adapter could not serve is refused."""

from __future__ import annotations

import pytest

from provision.k8s import autoscale
from provision_sim.k8s.external_metrics import (
    ExternalRule,
    RuleError,
    parse_rules,
    quantity,
    selector_matchers,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("signal", list(autoscale.SIGNALS.values()), ids=list(autoscale.SIGNALS))
def test_the_products_rules_give_the_products_queries(signal: autoscale.Signal) -> None:
    rules = parse_rules(autoscale.adapter_config())
    named = {rule.metric_name(signal.series): rule for rule in rules if rule.metric_name(signal.series)}
    assert list(named) == [signal.metric]  # one rule takes the series, under the rendered name
    rendered = named[signal.metric].query(signal.series, "serving", "pool=smol")
    assert rendered == autoscale.query(signal, "smol", "serving")


@pytest.mark.parametrize(
    ("selector", "matchers"),
    [
        ("", []),
        ("pool=smol", ['pool="smol"']),
        ("pool==smol,model!=x", ['pool="smol"', 'model!="x"']),
        ("pool in (a, b.c),tier notin (x)", ['pool=~"a|b\\\\.c"', 'tier!~"x"']),
        ("app.kubernetes.io/name=vllm", ['app_kubernetes_io_name="vllm"']),
        ("gpu,!spot", ['gpu!=""', 'spot=""']),
    ],
)
def test_label_selectors_become_promql_matchers(selector: str, matchers: list[str]) -> None:
    assert selector_matchers(selector) == matchers


def test_names_follow_matches_and_as_as_the_adapter_does() -> None:
    rule = ExternalRule.parse(
        {
            "seriesQuery": "{__name__=~'vllm:.*'}",
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>})",
            "name": {"matches": "^vllm:(.*)$"},
            "seriesFilters": [{"isNot": "_total$"}],
            "resources": {"namespaced": False},
        },
        "rule",
    )
    assert rule.metric_name("vllm:num_requests_waiting") == "num_requests_waiting"  # $1 by default
    assert rule.metric_name("vllm:prompt_tokens_total") is None  # filtered out
    assert rule.metric_name("node_load1") is None
    # namespaced: false: no namespace matcher, whatever the request's namespace
    assert rule.query("vllm:x", "any", "pool=a") == 'sum(vllm:x{pool="a"})'


def test_a_rule_the_adapter_could_not_serve_is_refused() -> None:
    with pytest.raises(RuleError, match="externalRules is missing"):
        parse_rules({"rules": []})
    with pytest.raises(RuleError, match=r"externalRules\[0\]: metricsQuery is required"):
        parse_rules({"externalRules": [{"seriesQuery": "x"}]})
    unmapped = ExternalRule.parse({"seriesQuery": "x", "metricsQuery": "sum(<<.Series>>)"}, "rule")
    with pytest.raises(RuleError, match="no label maps to the namespace"):
        unmapped.query("x", "ns", "")
    odd = ExternalRule.parse(
        {
            "seriesQuery": "x",
            "metricsQuery": "sum(<<.Series>>) by (<<.Nope>>)",
            "resources": {"namespaced": False},
        },
        "rule",
    )
    with pytest.raises(RuleError, match=r"cannot render <<\.Nope>>"):
        odd.query("x", "", "")
    with pytest.raises(RuleError, match="cannot read"):
        selector_matchers("pool=(")


def test_values_are_kubernetes_quantities() -> None:
    assert [quantity(v) for v in (0.0, 7.0, 1.5, 0.25)] == ["0", "7", "1500m", "250m"]

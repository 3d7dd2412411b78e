"""Reading the metric names out of PromQL and Grafana queries (``promql_names``)."""

from __future__ import annotations

import pytest
from promql_names import (
    dashboard_queries,
    grafana_to_promql,
    metric_names,
    rule_queries,
    template_metric_names,
)


def test_a_selectors_matchers_and_range_are_not_names():
    """Label names and values in braces, and the range in brackets, are not metric names."""
    expr = 'rate(requests_total{job="api", code=~"5.."}[5m])'
    assert metric_names(expr) == {"requests_total"}


def test_label_lists_of_aggregations_and_matching_are_not_names():
    """The labels after by, without, on, ignoring and group_left/right are not names."""
    expr = "sum by (job, rank) (a) / on(job) group_left(node) max without (pod) (b) * ignoring(x) c"
    assert metric_names(expr) == {"a", "b", "c"}


def test_functions_aggregations_and_keywords_are_not_names():
    """Calls, operators written as words, modifiers and special floats are not names."""
    expr = "abs(a offset 5m) > bool 1.2e3 and b unless c or vector(Inf) or d @ start() or NaN"
    assert metric_names(expr) == {"a", "b", "c", "d"}


def test_string_arguments_are_not_names():
    """A string argument (label_replace's) holds no names, whatever it looks like."""
    expr = 'label_replace(a, "dst_label", \'some_metric\', "src", `(.*)`)'
    assert metric_names(expr) == {"a"}


def test_names_with_colons_and_numbers_are_read_whole():
    """A recording rule's name (colons) and a name with digits are one name each."""
    assert metric_names("job:http_5xx:rate5m / 2 + x2_total") == {"job:http_5xx:rate5m", "x2_total"}


def test_grafana_variables_and_subqueries_leave_the_names():
    """$var, ${var}, [[var]] and a subquery's nested ranges leave only the metric's name."""
    expr = 'max_over_time(rate(a{job="$job", n="${node:regex}"}[$__rate_interval])[$__range:1m]) + [[b]]'
    assert metric_names(expr) == {"a"}


def test_a_selector_by_name_is_refused():
    """A __name__ matcher names no metric the text shows: refused, not read as none."""
    with pytest.raises(ValueError, match="__name__"):
        metric_names('{__name__=~"tb_monitor_.*"}')


def test_grafana_variables_take_their_values():
    """A template variable takes the given value, a built-in interval a duration."""
    query = 'rate(a{job="$job"}[$__rate_interval])[${__range}:1m]'
    assert grafana_to_promql(query, {"job": "train"}) == 'rate(a{job="train"}[1m])[1h:1m]'


def test_a_grafana_variable_without_a_value_is_an_error():
    """A variable with no value given is a KeyError naming it."""
    with pytest.raises(KeyError, match="node"):
        grafana_to_promql('a{node="$node"}')


def test_label_values_names_its_metric():
    """label_values(metric, label) names the metric; label_values(label) names none."""
    assert template_metric_names("label_values(tb_monitor_job_state, job)") == {
        "tb_monitor_job_state"
    }
    assert template_metric_names("label_values(job)") == set()


def test_dashboard_queries_include_panels_inside_rows():
    """Targets of panels nested in a collapsed row are queries too."""
    row = {"type": "row", "panels": [{"targets": [{"expr": "b"}, {"refId": "C"}]}]}
    dashboard = {"panels": [{"targets": [{"expr": "a"}]}, row]}
    assert list(dashboard_queries(dashboard)) == ["a", "b"]


def test_rule_queries_are_every_groups_exprs():
    """Each rule's expr, alerting or recording, of every group."""
    rules = {
        "groups": [
            {"rules": [{"alert": "A", "expr": "a"}]},
            {"rules": [{"record": "r", "expr": "b"}]},
        ]
    }
    assert list(rule_queries(rules)) == ["a", "b"]

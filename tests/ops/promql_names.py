"""The metric names a PromQL expression (or a Grafana query over one) selects, and the queries of
the operators' kit (``ops/``): so a test can hold every name the kit uses against what the sink
really serves.

A tolerant reading, not a parser: promtool checks the syntax (``test_ops_kit.py``). What is left
of an expression once its strings, label matchers, ranges, numbers and Grafana variables are
taken out, and the label lists of ``by``/``without``/``on``/``ignoring``/``group_left``/
``group_right``, is identifiers: each one not followed by ``(`` (a function or an aggregation)
and not a keyword is a metric name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

#: PromQL's words that are not names: operators, modifiers and the literals of special floats.
KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "start", "end", "inf", "nan"}
    | {"by", "without", "on", "ignoring", "group_left", "group_right"}
)
#: What Grafana puts in place of its variables (queries parse as PromQL with these).
GRAFANA_VALUES = {"__range": "1h", "__rate_interval": "1m", "__interval": "1m"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_NUMBER = re.compile(r"(?<![\w:.])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[a-zA-Z]*)")
_IDENTIFIER = re.compile(r"(?<![\w:])([a-zA-Z_:][\w:]*)(\s*\()?")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:([a-zA-Z_:][\w:]*)\s*,)?\s*\w+\s*\)\s*$")


def grafana_to_promql(query: str, variables: dict[str, str] | None = None) -> str:
    """A Grafana query as the PromQL Prometheus receives: each ``$var``, ``${var}`` or
    ``[[var]]`` replaced by its value in ``variables`` (a template variable), else by
    ``GRAFANA_VALUES``'s (a built-in interval)."""
    values = {**GRAFANA_VALUES, **(variables or {})}

    def value(match: re.Match[str]) -> str:
        name = next(group for group in match.groups() if group)
        if name not in values:
            raise KeyError(f"no value for Grafana variable ${name} in {query!r}")
        return values[name]

    return _VARIABLE.sub(value, query)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects. A selector by ``__name__`` is refused: which names it
    matches cannot be read from the text."""
    if "__name__" in expr:
        raise ValueError(f"a selector by __name__ names no metric: {expr!r}")
    text = _STRING.sub('""', _VARIABLE.sub(" ", expr))
    text = _MATCHERS.sub(" ", text)
    while True:  # a subquery's range may hold a range (nested brackets): take the innermost
        stripped = _RANGE.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    text = _LABEL_LIST.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    return {
        name
        for name, call in _IDENTIFIER.findall(text)
        if not call and name.lower() not in KEYWORDS
    }


def template_metric_names(query: str) -> set[str]:
    """The metric name of a Grafana variable's ``label_values(metric, label)`` query; an empty
    set for ``label_values(label)``. Any other query is PromQL (``query_result(...)``)."""
    found = _LABEL_VALUES.match(query)
    if found is None:
        return metric_names(query)
    return {found.group(1)} if found.group(1) else set()


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[str]:
    """Every panel target's ``expr`` of a Grafana dashboard, panels nested in rows included."""
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield target["expr"]


def template_queries(dashboard: dict[str, Any]) -> Iterator[str]:
    """The queries of a dashboard's query variables (Grafana keeps them as a string or as
    ``{"query": ...}``)."""
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            yield query["query"] if isinstance(query, dict) else query


def rule_queries(rules: dict[str, Any]) -> Iterator[str]:
    """Every ``expr`` of a Prometheus rules file (as loaded from its YAML)."""
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            yield rule["expr"]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))

"""A handler that raises never reaches the training code: one policy for both registries.

Our ``put_metric`` and ``log_event`` isolate a raising handler (logged once, counted), where
torch hands its error to the caller; only the caller's own mistake (a value no scalar can hold)
is raised to it, naming the metric. Our own handlers, which torch's registries call directly
with ``init(torch=True)``, never raise there for a fault on our side (a closed writer).
"""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

import tb_monitor.elastic.metrics as metrics
from tb_monitor import _event
from tb_monitor.elastic.metrics import api
from tb_monitor.sinks.handlers import TensorboardEventHandler, TensorboardMetricHandler
from tb_monitor.sinks.writer import AsyncWriter


class RaisingHandler(metrics.MetricHandler):
    """A user's metric handler with a bug: every emit raises."""

    def emit(self, metric_data: metrics.MetricData) -> None:
        raise RuntimeError(f"cannot handle {metric_data.name}")


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test starts from torchelastic's defaults: nothing configured, everything dropped."""
    monkeypatch.setattr(api, "_metrics_map", {})
    monkeypatch.setattr(api, "_default_metrics_handler", api.NullMetricHandler())
    monkeypatch.setattr(api, "_streams", {})
    monkeypatch.setattr(api, "_errors", {})


def _reports(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tb_monitor"]


def test_a_raising_metric_handler_is_isolated_counted_and_reported_once(caplog):
    """put_metric never raises a handler's error; each loss is counted, the first one logged."""
    handler = RaisingHandler()
    metrics.configure(handler, group="app")
    with caplog.at_level(logging.ERROR, logger="tb_monitor"):
        for i in range(3):
            metrics.put_metric(f"m{i}", i, "app")
    assert metrics.handler_errors(handler) == 3
    (report,) = _reports(caplog)
    assert "'m0'" in report.getMessage() and "'app'" in report.getMessage()
    assert report.exc_info[0] is RuntimeError


def test_prof_keeps_the_functions_own_outcome_when_the_handler_raises():
    """Under @prof, a raising handler neither replaces the function's exception nor its result."""
    metrics.configure(RaisingHandler())

    @metrics.prof
    def fails():
        raise KeyError("the training's own error")

    @metrics.prof
    def succeeds():
        return 42

    with pytest.raises(KeyError, match="the training's own error"):
        fails()
    assert succeeds() == 42


def test_event_and_metric_registries_share_the_policy(caplog):
    """A raising handler in log_event and in put_metric: the caller goes on, each loss is
    counted, one report each."""
    handle = _event.register_event_handler(lambda event: 1 / 0)
    handler = RaisingHandler()
    metrics.configure(handler)
    try:
        with caplog.at_level(logging.ERROR, logger="tb_monitor"):
            for _ in range(2):
                _event.log_event(_event.Event("e", datetime.now(), {}))
                metrics.put_metric("m", 1)
    finally:
        _event.unregister_event_handler(handle)
    assert handle.errors == metrics.handler_errors(handler) == 2
    assert [r.exc_info[0] for r in _reports(caplog)] == [ZeroDivisionError, RuntimeError]


def test_a_bad_value_is_the_callers_error_not_the_handlers(caplog):
    """When a handler fails on a value that is not a number, put_metric raises that, naming it."""
    handler = RaisingHandler()
    metrics.configure(handler, group="app")
    with pytest.raises(TypeError, match="'app/latency' must be a real number, got 'twelve'"):
        metrics.put_metric("latency", "twelve", "app")
    assert metrics.handler_errors(handler) == 0 and _reports(caplog) == []


def test_our_handlers_in_torchs_registries_never_raise_for_a_closed_writer(
    torch, logdir, monkeypatch
):
    """torch.monitor and torch's put_metric reach our handlers directly: a closed writer is quiet."""
    from torch.distributed.elastic.metrics import api as torch_api

    monkeypatch.setattr(torch_api, "_metrics_map", {})
    writer = AsyncWriter(str(logdir))
    events, metric = TensorboardEventHandler(writer), TensorboardMetricHandler(writer)
    handle = torch.monitor.register_event_handler(events)
    torch_api.configure(metric, group="app")
    writer.close()
    try:
        torch.monitor.log_event(torch.monitor.Event("epoch", datetime.now(), {"loss": 0.5}))
        torch_api.put_metric("latency", 12, "app")
    finally:
        torch.monitor.unregister_event_handler(handle)

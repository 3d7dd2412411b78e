"""The sink seam: ``init(sinks=[...])`` hands every record to every sink, isolating failures."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

import tb_monitor
from tb_monitor.elastic import events, metrics
from tb_monitor.logdir import readers
from tb_monitor.sinks import TensorboardMetricHandler
from tb_monitor.testing import MemorySink, manual_clock

HOUR = timedelta(hours=1)


class ThirdPartySink:
    """A sink as someone else would write one: plain methods, nothing of ours subclassed."""

    def __init__(self) -> None:
        self.received: list[tuple[str, object]] = []

    def window(self, window):
        self.received.append(("window", (window.stat, window.aggregations)))

    def metric(self, metric):
        self.received.append(("metric", (metric.group_name, metric.name, metric.value)))

    def event(self, event):
        self.received.append(("event", (event.name, event.data)))

    def timeline(self, record):
        self.received.append(("timeline", (record.kind, record.fields["name"])))

    def flush(self):
        self.received.append(("flush", None))

    def close(self):
        self.received.append(("close", None))


class BrokenSink(ThirdPartySink):
    """A sink that fails on every record."""

    def window(self, window):
        raise RuntimeError("broken window")

    def metric(self, metric):
        raise RuntimeError("broken metric")


def record_one_of_each() -> None:
    """One Stat window, one metric, one event and one torchelastic event."""
    with tb_monitor.Stat("loss", [tb_monitor.Aggregation.MEAN], HOUR) as loss:
        loss.add(1.0)
        loss.add(3.0)
    metrics.put_metric("steps", 7, "train")
    tb_monitor.log_event(tb_monitor.Event("epoch", datetime(2026, 1, 1), {"n": 1}))
    events.record(events.Event("w", events.EventSource.WORKER), "tensorboard")


def test_a_third_party_sink_receives_windows_metrics_events_and_timeline(logdir):
    """A class written here, subclassing nothing of ours, gets every kind of record, in order."""
    sink = ThirdPartySink()
    with tb_monitor.init(logdir, sinks=[sink]) as monitor:
        record_one_of_each()
        monitor.flush()
    assert sink.received == [
        ("window", ("loss", {"mean": 2.0})),
        ("metric", ("train", "steps", 7)),
        ("event", ("epoch", {"n": 1})),
        ("timeline", ("worker", "w")),
        ("flush", None),
        ("close", None),
    ]


def test_the_tensorboard_sink_still_writes_next_to_others(logdir):
    """With an extra sink, TensorBoard still gets the same scalars and timeline."""
    with tb_monitor.init(logdir, sinks=[MemorySink()]):
        record_one_of_each()
    scalars = {(p.tag, p.value) for p in readers.iter_scalars(logdir)}
    assert scalars == {("loss.mean", 2.0), ("train/steps", 7.0)}
    assert sorted(r.kind for r in readers.iter_timeline(logdir)) == ["monitor", "worker"]


def test_a_raising_sink_is_isolated_and_counted(logdir, caplog):
    """A sink that raises never reaches the loop: one warning names it, its drops are counted,
    and the sinks after it still receive every record."""
    broken, memory = BrokenSink(), MemorySink()
    with (
        caplog.at_level(logging.WARNING, logger="tb_monitor"),
        tb_monitor.init(logdir, sinks=[broken, memory]) as monitor,
    ):
        for step in range(3):
            metrics.put_metric("steps", step, "train")
        with tb_monitor.Stat("loss", [tb_monitor.Aggregation.MAX], HOUR) as loss:
            loss.add(1.0)
        assert monitor.drops(broken) == 4
        assert monitor.drops(memory) == 0
    assert [m.value for m in memory.metrics] == [0, 1, 2]
    assert memory.scalars() == {"loss.max": [1.0]}
    warnings = [r for r in caplog.records if "BrokenSink" in r.getMessage()]
    assert len(warnings) == 1  # once per sink, never per record


def test_tensorboard_false_replaces_it(logdir, monkeypatch):
    """``tensorboard=False`` sends records to the given sinks only, and needs no logdir."""
    monkeypatch.delenv("TB_MONITOR_LOGDIR", raising=False)
    memory = MemorySink()
    with tb_monitor.init(sinks=[memory], tensorboard=False) as monitor:
        assert monitor.sinks == (memory,) and monitor.writer is None
        record_one_of_each()
    assert [w.stat for w in memory.windows] == ["loss"]
    assert [r.fields["name"] for r in memory.timeline_records] == ["w"]
    assert list(logdir.iterdir()) == []


def test_one_tensorboard_sink_binds_its_handler_directly(logdir):
    """With TensorBoard alone, the metric handler is TensorBoard's own (no fan-out per call)."""
    with tb_monitor.init(logdir):
        assert isinstance(metrics.default_handler(), TensorboardMetricHandler)
    with tb_monitor.init(logdir, sinks=[MemorySink()]):
        assert not isinstance(metrics.default_handler(), TensorboardMetricHandler)


def test_the_memory_sink_sees_a_window_when_the_clock_ends_it(logdir):
    """A window ended by a manual clock reaches the in-memory sink with the clock's time."""
    memory = MemorySink()
    with manual_clock() as clock, tb_monitor.init(sinks=[memory], tensorboard=False):
        stat = tb_monitor.Stat("lr", [tb_monitor.Aggregation.VALUE], timedelta(seconds=10))
        stat.add(0.5)
        clock.advance(10)
        stat.close()
    (window,) = memory.windows
    assert window.data == {"lr.value": 0.5}
    assert window.aggregations == {"value": 0.5}


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"sinks": [object()]}, TypeError, "object object"),
        ({"sinks": "memory"}, TypeError, "'memory'"),
        ({"tensorboard": "no"}, TypeError, "'no'"),
        ({"prometheus_port": -1}, ValueError, "-1"),
        ({"prometheus_port": "9100"}, ValueError, "'9100'"),
    ],
)
def test_bad_sink_arguments_are_errors_naming_them(logdir, kwargs, error, named):
    """A bad ``sinks``, ``tensorboard`` or ``prometheus_port`` fails at init, naming the value."""
    with pytest.raises(error, match=named):
        tb_monitor.init(logdir, **kwargs)


def test_tensorboard_false_without_sinks_is_an_error(logdir):
    """Replacing TensorBoard by nothing is refused: there would be nowhere to write."""
    with pytest.raises(ValueError, match="tensorboard=False"):
        tb_monitor.init(logdir, tensorboard=False)

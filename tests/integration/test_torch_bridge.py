"""Our handlers installed into the real torch registries: torch.monitor, elastic metrics and events."""

from __future__ import annotations

import datetime
import json
import logging
import subprocess
import sys
import textwrap

import pytest
from conftest import need

pytestmark = pytest.mark.torch


class Collect(logging.Handler):
    """A logging handler keeping the messages it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class CollectMetrics:
    """A torchelastic metric handler keeping what it receives."""

    def __init__(self) -> None:
        self.data: list[tuple[str, str, int]] = []

    def emit(self, metric_data) -> None:
        self.data.append((metric_data.group_name, metric_data.name, metric_data.value))


@pytest.fixture
def bridge():
    """The bridge module, with real torch."""
    need("torch")
    from tb_monitor import torch_bridge as bridge

    return bridge


@pytest.fixture
def torch_events():
    """torch's elastic events package."""
    from torch.distributed.elastic import events

    return events


def _worker_event(torch_events, state="START"):
    return torch_events.Event(
        f"torchelastic.worker.status.{state}",
        source=torch_events.EventSource.WORKER,
        metadata={"state": state},
    )


def _record_captured(bridge, torch_events, destination: str) -> list[str]:
    """Capture ``destination``, record one torchelastic worker event to it, undo; the messages."""
    ours = Collect()
    undo = bridge.capture_events(ours, destination)
    try:
        torch_events.record(_worker_event(torch_events), destination)
    finally:
        undo()
    return ours.messages


def test_new_destination_receives_torch_records(bridge, torch_events):
    """A destination torch does not know gets our handler, and records reach it."""
    messages = _record_captured(bridge, torch_events, "tb-test-new")
    assert [json.loads(m)["name"] for m in messages] == ["torchelastic.worker.status.START"]


def test_undo_forgets_a_new_destination(bridge, torch_events):
    """Undoing removes the destination from torch's registry and logger cache."""
    from torch.distributed.elastic.events import handlers

    bridge.capture_events(Collect(), "tb-test-undo")()
    assert "tb-test-undo" not in handlers._log_handlers
    assert "tb-test-undo" not in torch_events._events_loggers


def test_loglevel_warning_keeps_events(bridge, torch_events, monkeypatch):
    """torch's LOGLEVEL=WARNING event logger still hands INFO event records to our handler."""
    monkeypatch.setenv("LOGLEVEL", "WARNING")
    assert len(_record_captured(bridge, torch_events, "tb-test-level")) == 1


def test_chosen_destination_keeps_its_handler_and_level(bridge, torch_events, monkeypatch):
    """A user's destination keeps its handler, which still filters at LOGLEVEL; ours sees all."""
    from torch.distributed.elastic.events import handlers

    monkeypatch.setenv("LOGLEVEL", "WARNING")
    theirs, ours = Collect(), Collect()
    monkeypatch.setitem(handlers._log_handlers, "tb-test-user", theirs)
    undo = bridge.capture_events(ours, "tb-test-user")
    try:
        torch_events.record(_worker_event(torch_events), "tb-test-user")
        torch_events._get_or_create_logger("tb-test-user").warning("a warning")
    finally:
        undo()
    assert len(ours.messages) == 2
    assert theirs.messages == ["a warning"]
    assert torch_events._get_or_create_logger("tb-test-user").handlers == [theirs]
    torch_events._events_loggers.pop("tb-test-user")


def test_rendezvous_events_are_built_once_captured(bridge, torch_events):
    """Capturing dynamic_rendezvous turns on torch's rendezvous events; undo turns them off."""
    from torch.distributed.elastic.events import handlers

    ours = Collect()
    undo = bridge.capture_events(ours, "dynamic_rendezvous")
    try:
        torch_events.construct_and_record_rdzv_event(
            run_id="job", message="joined", node_state=torch_events.NodeState.RUNNING
        )
    finally:
        undo()
    assert json.loads(ours.messages[0])["message"] == "joined"
    assert isinstance(handlers.get_logging_handler("dynamic_rendezvous"), logging.NullHandler)


def test_metrics_reach_our_handler_until_undone(bridge):
    """torchelastic's put_metric reaches the handler configured as default, then no longer."""
    from torch.distributed.elastic import metrics

    ours = CollectMetrics()
    undo = bridge.configure_metrics(ours)
    metrics.put_metric("workers.default.healthy", 1)
    undo()
    metrics.put_metric("workers.default.healthy", 2)
    assert ours.data == [("torchelastic", "workers.default.healthy", 1)]


def test_metric_group_undo_restores_default_routing(bridge):
    """Undoing a group's handler sends that group to the default handler again."""
    from torch.distributed.elastic import metrics

    ours = CollectMetrics()
    bridge.configure_metrics(ours, group="tb-test-group")()
    metrics.put_metric("m", 1, "tb-test-group")
    assert ours.data == []


def test_metrics_undo_keeps_a_handler_configured_after_it(bridge):
    """Undoing our default handler leaves one configured after ours in place."""
    from torch.distributed.elastic import metrics
    from torch.distributed.elastic.metrics import api

    before = api._default_metrics_handler
    ours, theirs = CollectMetrics(), CollectMetrics()
    undo = bridge.configure_metrics(ours)
    metrics.configure(theirs)
    undo()
    try:
        metrics.put_metric("m", 1)
        assert (ours.data, theirs.data) == ([], [("torchelastic", "m", 1)])
    finally:
        metrics.configure(before)


def test_torch_monitor_events_arrive_as_ours(bridge):
    """A torch.monitor event reaches our handler as a tb_monitor Event with the same fields."""
    import torch.monitor

    import tb_monitor

    got: list[tb_monitor.Event] = []
    undo = bridge.register_monitor_handler(got.append)
    when = datetime.datetime(2024, 5, 1, 12, 0, 0)
    try:
        torch.monitor.log_event(torch.monitor.Event("tb.test", when, {"a": 1, "b": "x"}))
    finally:
        undo()
    torch.monitor.log_event(torch.monitor.Event("tb.after", when, {}))
    assert got == [tb_monitor.Event("tb.test", when, {"a": 1, "b": "x"})]


def test_failing_monitor_handler_never_reaches_the_caller(bridge, caplog):
    """A handler that raises is logged once; torch.monitor's caller does not see the error."""
    import torch.monitor

    def broken(event):
        raise ValueError("broken handler")

    undo = bridge.register_monitor_handler(broken)
    try:
        for _ in range(3):
            torch.monitor.log_event(torch.monitor.Event("tb.x", datetime.datetime.now(), {}))
    finally:
        undo()
    assert sum("broken" in r.getMessage() for r in caplog.records) == 1


def test_install_and_close_restore_everything(bridge, torch_events):
    """install() captures events and metrics; close() puts torch's registries back."""
    from torch.distributed.elastic import metrics
    from torch.distributed.elastic.metrics import api

    default_before = api._default_metrics_handler
    ours, ours_metrics = Collect(), CollectMetrics()
    with bridge.install(logging_handler=ours, metric_handler=ours_metrics):
        torch_events.record(_worker_event(torch_events), "tensorboard")
        metrics.put_metric("x", 3)
    assert len(ours.messages) == 1 and ours_metrics.data == [("torchelastic", "x", 3)]
    assert api._default_metrics_handler is default_before


def test_monitor_handler_left_registered_exits_cleanly(tmp_path):
    """A process ending with our torch.monitor handler registered and a Stat holding data exits 0."""
    need("torch")
    script = textwrap.dedent(
        """
        import datetime, torch.monitor
        from tb_monitor.torch_bridge import register_monitor_handler
        seen = []
        register_monitor_handler(seen.append)
        stat = torch.monitor.Stat(
            "loss", [torch.monitor.Aggregation.MEAN], datetime.timedelta(hours=1)
        )
        stat.add(1.0)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr

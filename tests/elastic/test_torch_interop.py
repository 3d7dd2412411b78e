"""tb_monitor.elastic against the real torchelastic: same surface, same JSON, same names."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
from types import ModuleType
from unittest import mock

import pytest

import tb_monitor.elastic.events as our_events
import tb_monitor.elastic.metrics as our_metrics
from tb_monitor.elastic.events import api as our_events_api
from tb_monitor.elastic.metrics import api as our_metrics_api

pytestmark = pytest.mark.torch

METADATA = {
    "run_id": "job-1",
    "global_rank": None,
    "group_rank": 0,
    "state": "SUCCEEDED",
    "total_run_time": 12.5,
    "raw_error": 'quote " backslash \\ newline \n unicode é ✓',
    "flag": True,
}


@pytest.fixture
def torch_events(torch) -> ModuleType:
    """torch.distributed.elastic.events."""
    return importlib.import_module("torch.distributed.elastic.events")


@pytest.fixture
def torch_metrics_api(torch) -> ModuleType:
    """torch.distributed.elastic.metrics.api."""
    return importlib.import_module("torch.distributed.elastic.metrics.api")


@pytest.fixture(autouse=True)
def fresh_destinations(monkeypatch):
    """Destinations registered here disappear after each test."""
    monkeypatch.setattr(
        our_events.handlers, "_log_handlers", dict(our_events.handlers._log_handlers)
    )
    monkeypatch.setattr(our_events, "_events_loggers", {})


@contextlib.contextmanager
def torch_destination(torch_events, name, handler):
    """``name`` registered in torchelastic's events for the block, its logger emptied after."""
    try:
        with (
            mock.patch.dict(torch_events.handlers._log_handlers, {name: handler}),
            mock.patch.dict(torch_events._events_loggers),
        ):
            yield
    finally:
        logging.getLogger(f"torchelastic-events-{name}").handlers.clear()


class Capture(logging.Handler):
    """Appends each record's message to a list."""

    def __init__(self, sink: list[str]):
        super().__init__()
        self.sink = sink

    def emit(self, record):
        self.sink.append(record.getMessage())


def rdzv_fields(node_state: str) -> dict:
    return {
        "name": "dynamic_rendezvous.py:next_rendezvous",
        "run_id": "job-1",
        "message": "Rendezvous complete ✓",
        "hostname": "node-0.cluster",
        "pid": 4242,
        "node_state": node_state,
        "master_endpoint": "node-0:29500",
        "rank": 3,
        "local_id": None,
        "error_trace": "Traceback ...\n",
    }


def test_public_names_cover_torchelastic(torch_events, torch_metrics_api):
    """Every public name of torchelastic's metrics and events modules exists here too."""
    torch_metrics = importlib.import_module("torch.distributed.elastic.metrics")
    torch_events_api = importlib.import_module("torch.distributed.elastic.events.api")
    for theirs, ours in [
        (torch_metrics_api.__all__, our_metrics_api),
        ([n for n in dir(torch_metrics) if not n.startswith("_")], our_metrics),
        (torch_events_api.__all__ + ["EventMetadataValue"], our_events_api),
        ([n for n in dir(torch_events) if not n.startswith("_")], our_events),
    ]:
        modules = {"api", "handlers", "inspect", "logging", "os", "socket", "traceback"}
        # initialize_metrics and static_init are torch's internal launcher hooks (no-ops in OSS).
        skipped = modules | {"Optional", "initialize_metrics"}
        missing = [n for n in theirs if n not in skipped and not hasattr(ours, n)]
        assert missing == [], f"{ours.__name__} lacks {missing}"


def test_enums_match_torchelastic(torch_events):
    """EventSource and NodeState have torchelastic's members and values."""
    for ours, theirs in [
        (our_events.EventSource, torch_events.EventSource),
        (our_events.NodeState, torch_events.NodeState),
    ]:
        assert [(m.name, m.value) for m in ours] == [(m.name, m.value) for m in theirs]


def test_event_json_is_byte_identical_to_torch(torch_events):
    """The same Event serializes to exactly torchelastic's bytes."""
    ours = our_events.Event("torchelastic.worker.status.SUCCEEDED", "AGENT", 17, METADATA)
    theirs = torch_events.Event(
        "torchelastic.worker.status.SUCCEEDED", torch_events.EventSource.AGENT, 17, METADATA
    )
    assert ours.serialize() == theirs.serialize()
    assert str(ours) == str(theirs)


def test_rdzv_event_json_is_byte_identical_to_torch(torch_events):
    """The same RdzvEvent serializes to exactly torchelastic's bytes."""
    ours = our_events.RdzvEvent(**rdzv_fields("SUCCEEDED"))
    theirs = torch_events.RdzvEvent(
        **{**rdzv_fields("SUCCEEDED"), "node_state": torch_events.NodeState.SUCCEEDED}
    )
    assert ours.serialize() == theirs.serialize()


def test_torch_event_json_deserializes_here(torch_events):
    """An Event serialized by torchelastic deserializes here and re-serializes to its bytes."""
    data = torch_events.Event("e", torch_events.EventSource.WORKER, 5, METADATA).serialize()
    ours = our_events.Event.deserialize(data)
    assert (ours.name, ours.source, ours.timestamp) == ("e", our_events.EventSource.WORKER, 5)
    assert ours.metadata == json.loads(data)["metadata"]
    assert ours.serialize() == data


def test_our_event_json_deserializes_in_torch(torch_events):
    """An Event serialized here deserializes in torchelastic to the same event."""
    data = our_events.Event("e", "WORKER", 5, METADATA).serialize()
    theirs = torch_events.Event.deserialize(data)
    assert theirs.source is torch_events.EventSource.WORKER
    assert theirs.serialize() == data


@pytest.mark.parametrize("state", ["INIT", "RUNNING", "SUCCEEDED", "FAILED"])
def test_rdzv_event_json_round_trips_both_ways(torch_events, state):
    """A RdzvEvent crosses between torchelastic and here in both directions unchanged."""
    theirs = torch_events.RdzvEvent(
        **{**rdzv_fields(state), "node_state": torch_events.NodeState[state]}
    )
    ours = our_events.RdzvEvent.deserialize(theirs.serialize())
    assert ours.node_state is our_events.NodeState[state]
    assert ours.serialize() == theirs.serialize()
    assert torch_events.RdzvEvent.deserialize(ours.serialize()) == theirs


def test_event_log_record_matches_torch(torch_events):
    """record() hands its handler the same message torchelastic's record() does."""
    ours, theirs = [], []
    event_args = ("e", "AGENT", 0, METADATA)
    our_events.register_destination("interop-capture", Capture(ours))
    our_events.record(our_events.Event(*event_args), "interop-capture")
    with torch_destination(torch_events, "interop-capture", Capture(theirs)):
        torch_events.record(torch_events.Event(*event_args), "interop-capture")
    assert ours == theirs != []


def test_torch_and_our_loggers_stay_apart(torch_events):
    """torchelastic's logger for a destination never picks up our handler, nor ours torch's."""
    ours, theirs = [], []
    our_events.register_destination("interop-apart", Capture(ours))
    with torch_destination(torch_events, "interop-apart", Capture(theirs)):
        torch_events.record(torch_events.Event("from-torch", "AGENT"), "interop-apart")
        our_events.record(our_events.Event("from-us", "AGENT"), "interop-apart")
    assert [json.loads(m)["name"] for m in ours] == ["from-us"]
    assert [json.loads(m)["name"] for m in theirs] == ["from-torch"]


def _module_function():
    pass


class Worker:
    def step(self):
        pass


@pytest.mark.parametrize("fn", [_module_function, Worker.step, Worker().step])
def test_metric_names_match_torch(torch_metrics_api, fn):
    """Functions and methods get torchelastic's metric names."""
    assert our_metrics_api._get_metric_name(fn) == torch_metrics_api._get_metric_name(fn)


def test_prof_publishes_what_torch_prof_publishes(torch_metrics_api):
    """@prof publishes the same names, values and group as torchelastic's @prof."""

    def publish(api_module):
        seen = []

        class Capture(api_module.MetricHandler):
            def emit(self, metric_data):
                seen.append((metric_data.group_name, metric_data.name, metric_data.value))

        stream = api_module.MetricStream("agent", Capture())

        def failing():
            raise KeyError("x")

        with mock.patch.object(api_module, "getStream", return_value=stream):
            api_module.prof(Worker.step, group="agent")(Worker())
            with pytest.raises(KeyError):
                api_module.prof(failing, group="agent")()
        return [(g, n, v if not n.endswith(".ms") else "ms") for g, n, v in seen]

    assert publish(our_metrics_api) == publish(torch_metrics_api)


def test_console_handler_output_matches_torch(torch_metrics_api, capsys):
    """ConsoleMetricHandler prints exactly what torchelastic's prints."""
    data = (1574213883.4182858, "my_app", "latency", 12)
    our_metrics.ConsoleMetricHandler().emit(our_metrics.MetricData(*data))
    torch_metrics_api.ConsoleMetricHandler().emit(torch_metrics_api.MetricData(*data))
    ours, theirs = capsys.readouterr().out.splitlines()
    assert ours == theirs


def test_metric_data_fields_match_torch(torch_metrics_api):
    """MetricData has torchelastic's fields, in order."""
    assert our_metrics.MetricData._fields == torch_metrics_api.MetricData._fields

"""tb_monitor.elastic.events: torchelastic's events API, ported behaviour by behaviour."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
from dataclasses import asdict
from unittest.mock import patch

import pytest

from tb_monitor.elastic import events
from tb_monitor.elastic.events import (
    Event,
    EventSource,
    NodeState,
    RdzvEvent,
    _get_or_create_logger,
    construct_and_record_rdzv_event,
    handlers,
)


class CapturingHandler(logging.Handler):
    """Keeps every log record it handles."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def fresh_destinations(monkeypatch):
    """Each test starts from the built-in destinations and no loggers."""
    monkeypatch.setattr(handlers, "_log_handlers", dict(handlers._log_handlers))
    monkeypatch.setattr(events, "_events_loggers", {})


def make_rdzv_event() -> RdzvEvent:
    return RdzvEvent(
        name="test_name",
        run_id="test_run_id",
        message="test_message",
        hostname="test_hostname",
        pid=1,
        node_state=NodeState.RUNNING,
        master_endpoint="test_master_endpoint",
        rank=3,
        local_id=4,
        error_trace="test_error_trace",
    )


def test_get_or_create_logger_has_the_destination_handler_only():
    """A destination's logger has exactly one handler: the destination's."""
    with patch("tb_monitor.elastic.events.get_logging_handler") as get_mock:
        get_mock.return_value = logging.NullHandler()
        logger = _get_or_create_logger("test_destination")
    assert len(logger.handlers) == 1
    assert logger.handlers[0] is get_mock.return_value


def test_logger_is_named_non_propagating_at_info():
    """The logger is torchelastic-events-<destination>, does not propagate, and logs INFO."""
    logger = _get_or_create_logger("console")
    assert (logger.name, logger.propagate, logger.level) == (
        "torchelastic-events-console",
        False,
        logging.INFO,
    )


def test_logger_is_created_once_per_destination():
    """The same destination always gives the same logger."""
    assert _get_or_create_logger("null") is _get_or_create_logger("null")


def test_event_created():
    """An Event keeps its name, source and metadata; timestamp defaults to 0."""
    event = Event(
        name="test_event", source=EventSource.AGENT, metadata={"key1": "value1", "key2": 2}
    )
    assert (event.name, event.source, event.timestamp) == ("test_event", EventSource.AGENT, 0)
    assert event.metadata == {"key1": "value1", "key2": 2}


def test_event_source_name_becomes_member():
    """An Event built with the string "WORKER" holds EventSource.WORKER."""
    assert Event("e", "WORKER").source is EventSource.WORKER


def test_event_json_round_trip():
    """An Event deserializes from its own JSON to an equal Event."""
    event = Event(
        name="test_event",
        source=EventSource.AGENT,
        timestamp=1700000000000,
        metadata={"key1": "value1", "key2": 2, "key3": 1.0, "key4": None, "key5": True},
    )
    assert Event.deserialize(event.serialize()) == event


def test_event_deserialize_passes_events_through():
    """Event.deserialize of an Event returns that Event."""
    event = Event("e", EventSource.AGENT)
    assert Event.deserialize(event) is event


def test_event_str_is_its_json():
    """str(event) is json.dumps(asdict(event))."""
    event = Event("e", EventSource.WORKER, metadata={"k": "v"})
    assert str(event) == json.dumps(asdict(event)) == event.serialize()


def test_rdzv_event_created():
    """A RdzvEvent keeps every field it was given."""
    event = make_rdzv_event()
    assert asdict(event) == {
        "name": "test_name",
        "run_id": "test_run_id",
        "message": "test_message",
        "hostname": "test_hostname",
        "pid": 1,
        "node_state": NodeState.RUNNING,
        "master_endpoint": "test_master_endpoint",
        "rank": 3,
        "local_id": 4,
        "error_trace": "test_error_trace",
    }


def test_rdzv_event_json_round_trip():
    """A RdzvEvent deserializes from its JSON, or from itself, to an equal RdzvEvent."""
    event = make_rdzv_event()
    assert RdzvEvent.deserialize(event.serialize()) == event
    assert RdzvEvent.deserialize(event) is event


def test_rdzv_event_str_is_its_json():
    """str(rdzv_event) is json.dumps(asdict(rdzv_event))."""
    event = make_rdzv_event()
    assert str(event) == json.dumps(asdict(event))


def test_node_state_name_becomes_member():
    """A RdzvEvent built with the string "FAILED" holds NodeState.FAILED."""
    event = RdzvEvent("n", "r", "m", "h", 1, "FAILED")
    assert event.node_state is NodeState.FAILED


@pytest.mark.parametrize("value", [[1, 2], {"nested": 1}, object(), (1,)])
def test_metadata_value_outside_event_metadata_value_is_a_type_error(value):
    """A metadata value that is not str/int/float/bool/None is rejected, naming key and value."""
    with pytest.raises(TypeError, match=r"Event.metadata\['bad'\] = .*EventMetadataValue"):
        Event("e", EventSource.AGENT, metadata={"ok": 1, "bad": value})


def test_metadata_key_must_be_str():
    """A metadata key that is not a str is rejected, naming it."""
    with pytest.raises(TypeError, match="key 5"):
        Event("e", EventSource.AGENT, metadata={5: "v"})


def test_event_name_must_be_str():
    """A non-str Event name is rejected, naming it."""
    with pytest.raises(TypeError, match=r"Event.name must be str, got 42"):
        Event(42, EventSource.AGENT)


def test_unknown_event_source_is_a_value_error():
    """An unknown source name is a ValueError naming it and the known sources."""
    with pytest.raises(ValueError, match=r"unknown EventSource 'TRAINER'.*AGENT, WORKER"):
        Event("e", "TRAINER")


def test_non_str_event_source_is_a_type_error():
    """A source that is neither an EventSource nor a str is a TypeError naming it."""
    with pytest.raises(TypeError, match=r"Event.source .* got 3"):
        Event("e", 3)


def test_rdzv_event_fields_are_type_checked():
    """A RdzvEvent with a wrongly typed field is rejected, naming the field and value."""
    with pytest.raises(TypeError, match=r"RdzvEvent.pid must be int, got '12'"):
        RdzvEvent("n", "r", "m", "h", "12", NodeState.INIT)


def test_deserialize_unknown_event_source_is_a_value_error():
    """JSON with an unknown source is a ValueError naming the value."""
    data = json.dumps({"name": "e", "source": "MARTIAN", "timestamp": 0, "metadata": {}})
    with pytest.raises(ValueError, match="'MARTIAN'"):
        Event.deserialize(data)


def test_deserialize_unknown_node_state_is_a_value_error():
    """JSON with an unknown node_state is a ValueError naming the value."""
    data = json.loads(make_rdzv_event().serialize())
    data["node_state"] = "EXPLODED"
    with pytest.raises(ValueError, match="'EXPLODED'"):
        RdzvEvent.deserialize(json.dumps(data))


def test_deserialize_non_object_json_is_a_value_error():
    """JSON that is not an object is a ValueError showing it."""
    with pytest.raises(ValueError, match=r"\[1, 2\]"):
        Event.deserialize("[1, 2]")


def test_deserialize_non_str_is_a_type_error():
    """Deserializing something other than a str or an event is a TypeError naming it."""
    with pytest.raises(TypeError, match="12"):
        Event.deserialize(12)


def test_record_logs_the_json_and_attaches_the_event():
    """record() logs the event's JSON at INFO, with the event object as record.tb_event."""
    capture = CapturingHandler()
    events.register_destination("capture", capture)
    event = Event("e", EventSource.WORKER, metadata={"k": 1})
    events.record(event, "capture")
    (log_record,) = capture.records
    assert log_record.getMessage() == event.serialize()
    assert log_record.levelno == logging.INFO
    assert log_record.tb_event is event


def test_record_defaults_to_the_null_destination():
    """record(event) without a destination goes to the "null" destination."""
    capture = CapturingHandler()
    events.register_destination("null", capture)
    events.record(Event("e", EventSource.AGENT))
    assert [r.tb_event.name for r in capture.records] == ["e"]


def test_record_rdzv_event_goes_to_dynamic_rendezvous():
    """record_rdzv_event logs to the dynamic_rendezvous destination, with the event attached."""
    capture = CapturingHandler()
    events.register_destination("dynamic_rendezvous", capture)
    event = make_rdzv_event()
    events.record_rdzv_event(event)
    (log_record,) = capture.records
    assert (log_record.getMessage(), log_record.tb_event) == (event.serialize(), event)


def test_events_do_not_reach_the_root_logger(caplog):
    """Recorded events are handled once, by their destination, never by root handlers."""
    capture = CapturingHandler()
    events.register_destination("capture", capture)
    with caplog.at_level(logging.DEBUG):
        events.record(Event("e", EventSource.AGENT), "capture")
    assert len(capture.records) == 1
    assert caplog.records == []


def test_loglevel_warning_does_not_drop_events(monkeypatch):
    """With LOGLEVEL=WARNING (which makes torchelastic drop events) events still arrive."""
    monkeypatch.setenv("LOGLEVEL", "WARNING")
    capture = CapturingHandler()
    events.register_destination("capture", capture)
    events.record(Event("e", EventSource.AGENT), "capture")
    assert len(capture.records) == 1


def test_logging_disable_silences_events():
    """logging.disable() silences events, also on a logger that already delivered some."""
    capture = CapturingHandler()
    events.register_destination("capture", capture)
    events.record(Event("before", EventSource.AGENT), "capture")
    logging.disable(logging.CRITICAL)
    try:
        events.record(Event("disabled", EventSource.AGENT), "capture")
    finally:
        logging.disable(logging.NOTSET)
    events.record(Event("after", EventSource.AGENT), "capture")
    assert [r.tb_event.name for r in capture.records] == ["before", "after"]


def test_register_destination_replaces_handler_of_live_logger():
    """Re-registering a destination whose logger exists sends later events to the new handler."""
    first, second = CapturingHandler(), CapturingHandler()
    events.register_destination("dest", first)
    events.record(Event("one", EventSource.AGENT), "dest")
    events.register_destination("dest", second)
    events.record(Event("two", EventSource.AGENT), "dest")
    assert [r.tb_event.name for r in first.records] == ["one"]
    assert [r.tb_event.name for r in second.records] == ["two"]
    assert _get_or_create_logger("dest").handlers == [second]
    assert events.get_logging_handler("dest") is second


def test_unregister_destination_forgets_it_and_its_logger():
    """After unregister_destination, recording there is an unknown-destination error."""
    capture = CapturingHandler()
    events.register_destination("dest", capture)
    events.record(Event("kept", EventSource.AGENT), "dest")
    assert events.unregister_destination("dest") is capture
    with pytest.raises(ValueError, match="'dest'"):
        events.record(Event("dropped", EventSource.AGENT), "dest")
    assert [r.tb_event.name for r in capture.records] == ["kept"]


def test_unregister_unknown_destination_names_it():
    """Unregistering a destination that is not registered is an error naming it."""
    with pytest.raises(ValueError, match="'never-registered'"):
        events.unregister_destination("never-registered")


def test_unknown_destination_names_it_and_the_known_ones():
    """An unknown destination is a ValueError naming it and listing the registered ones."""
    with pytest.raises(
        ValueError, match=r"'tensorboard'.*console, dynamic_rendezvous, null"
    ) as info:
        events.get_logging_handler("tensorboard")
    assert isinstance(info.value, KeyError)  # what torchelastic raises, for existing handlers


def test_record_to_unknown_destination_fails_and_creates_no_logger():
    """record() to an unknown destination raises by name and leaves no logger behind."""
    with pytest.raises(ValueError, match="'nowhere'"):
        events.record(Event("e", EventSource.AGENT), "nowhere")
    assert "nowhere" not in events._events_loggers


def test_non_str_destination_is_a_type_error():
    """A destination that is not a str (even unhashable) is a TypeError naming it."""
    with pytest.raises(TypeError, match=r"\['console'\]"):
        events.record(Event("e", EventSource.AGENT), ["console"])


def test_register_destination_rejects_bad_name_and_handler():
    """register_destination needs a non-empty str name and a logging.Handler, named if wrong."""
    with pytest.raises(ValueError, match="''"):
        events.register_destination("", logging.NullHandler())
    with pytest.raises(TypeError, match="None"):
        events.register_destination(None, logging.NullHandler())
    with pytest.raises(TypeError, match="'dest'.*print"):
        events.register_destination("dest", print)


def test_builtin_destinations_match_torchelastic():
    """console is a StreamHandler; null and dynamic_rendezvous are NullHandlers."""
    assert type(events.get_logging_handler("console")) is logging.StreamHandler
    assert isinstance(events.get_logging_handler("null"), logging.NullHandler)
    assert isinstance(events.get_logging_handler("dynamic_rendezvous"), logging.NullHandler)
    assert isinstance(events.get_logging_handler(), logging.NullHandler)


def test_record_while_reregistering_loses_nothing():
    """Events recorded from threads while the destination is re-registered each reach a handler."""
    captures = [CapturingHandler(), CapturingHandler()]
    events.register_destination("dest", captures[0])
    done = threading.Event()

    def flip():
        flips = 0
        while not done.is_set() or flips < 10:
            events.register_destination("dest", captures[flips % 2])
            flips += 1

    def work():
        for i in range(500):
            events.record(Event(f"e{i}", EventSource.WORKER), "dest")

    flipper = threading.Thread(target=flip)
    workers = [threading.Thread(target=work) for _ in range(4)]
    flipper.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    done.set()
    flipper.join(timeout=120)
    assert sum(len(c.records) for c in captures) == 4 * 500


@pytest.mark.parametrize(
    ("handler", "calls"), [(logging.StreamHandler(), 1), (logging.NullHandler(), 0)]
)
def test_construct_and_record_rdzv_event_records_unless_null(handler, calls):
    """The event is built and recorded, unless dynamic_rendezvous is a NullHandler."""
    with (
        patch("tb_monitor.elastic.events.get_logging_handler", return_value=handler),
        patch("tb_monitor.elastic.events.record_rdzv_event") as record_mock,
    ):
        construct_and_record_rdzv_event(
            run_id="test_run_id", message="test_message", node_state=NodeState.RUNNING
        )
    assert record_mock.call_count == calls


def test_construct_and_record_rdzv_event_fills_defaults():
    """Defaults: this host's FQDN, this pid, name <caller file>:<caller function>, no trace."""
    capture = CapturingHandler()
    events.register_destination("dynamic_rendezvous", capture)
    construct_and_record_rdzv_event(run_id="r", message="m", node_state=NodeState.RUNNING, rank=2)
    event = capture.records[0].tb_event
    assert event.name == "test_events.py:test_construct_and_record_rdzv_event_fills_defaults"
    assert (event.hostname, event.pid, event.rank, event.error_trace) == (
        socket.getfqdn(),
        os.getpid(),
        2,
        "",
    )


def test_construct_and_record_rdzv_event_keeps_given_name():
    """A given name is kept after the caller's file name."""
    capture = CapturingHandler()
    events.register_destination("dynamic_rendezvous", capture)
    construct_and_record_rdzv_event(
        run_id="r", message="m", node_state=NodeState.INIT, name="Handler.join", pid=77
    )
    event = capture.records[0].tb_event
    assert (event.name, event.pid) == ("test_events.py:Handler.join", 77)


def test_construct_and_record_failed_rdzv_event_carries_the_traceback():
    """A FAILED event built while handling an exception carries its traceback."""
    capture = CapturingHandler()
    events.register_destination("dynamic_rendezvous", capture)
    try:
        raise RuntimeError("store unreachable")
    except RuntimeError:
        construct_and_record_rdzv_event(run_id="r", message="m", node_state=NodeState.FAILED)
    trace = capture.records[0].tb_event.error_trace
    assert trace.startswith("Traceback") and "RuntimeError: store unreachable" in trace


def test_events_work_without_torch():
    """The events API imports and records with torch unimportable."""
    code = textwrap.dedent(
        """
        import logging, sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        from tb_monitor.elastic import events
        handler = logging.StreamHandler(sys.stdout)
        events.register_destination("out", handler)
        events.record(events.Event("started", "AGENT", metadata={"k": 1}), "out")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert json.loads(out) == {
        "name": "started",
        "source": "AGENT",
        "timestamp": 0,
        "metadata": {"k": 1},
    }

"""Event validation and the handler registry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

import pytest

from tb_monitor import _event
from tb_monitor._event import (
    Event,
    EventHandlerHandle,
    log_event,
    register_event_handler,
    unregister_event_handler,
)

NOW = datetime(2024, 5, 17, 12, 30, 0)


@pytest.fixture
def register():
    """register_event_handler that unregisters what is still registered after the test."""
    handles: list[EventHandlerHandle] = []

    def _register(handler: Callable) -> EventHandlerHandle:
        handle = register_event_handler(handler)
        handles.append(handle)
        return handle

    yield _register
    for handle in handles:
        if handle in _event._handlers:
            unregister_event_handler(handle)


def test_event_keeps_its_fields():
    """An Event exposes name, timestamp and a copy of its data."""
    data = {"s": "text", "i": 3, "f": 0.5, "b": True}
    event = Event("epoch", NOW, data)
    data["i"] = 4
    assert (event.name, event.timestamp, event.data) == (
        "epoch",
        NOW,
        {"s": "text", "i": 3, "f": 0.5, "b": True},
    )


def test_bool_values_stay_bool():
    """A bool data value keeps its type (torch turns it into 1.0)."""
    assert type(Event("e", NOW, {"flag": True}).data["flag"]) is bool


def test_numpy_scalars_become_python_values():
    """numpy scalars are stored as the Python bool, int or float they hold."""
    np = pytest.importorskip("numpy")
    data = Event(
        "e",
        NOW,
        {"f": np.float32(0.5), "d": np.float64(1.5), "i": np.int64(7), "b": np.bool_(False)},
    ).data
    assert data == {"f": 0.5, "d": 1.5, "i": 7, "b": False}
    assert [type(v) for v in data.values()] == [float, float, int, bool]


@pytest.mark.parametrize("bad", [None, [1], {"x": 1}, b"raw", 1 + 2j, object()])
def test_unsupported_values_raise_typeerror_naming_key_and_value(bad):
    """A data value outside data_value_t is refused with its key and value in the message."""
    with pytest.raises(TypeError, match="key 'bad'") as caught:
        Event("e", NOW, {"ok": 1, "bad": bad})
    assert repr(bad) in str(caught.value)


def test_non_str_keys_raise_typeerror():
    """Data keys must be str."""
    with pytest.raises(TypeError, match="key 1"):
        Event("e", NOW, {1: 2})


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("", NOW, {}), ValueError, "must not be empty"),
        ((None, NOW, {}), TypeError, "name must be a str"),
        (("e", 1700000000.0, {}), TypeError, "'e': timestamp must be a datetime"),
        (("e", NOW, [("k", 1)]), TypeError, "'e': data must be a mapping"),
    ],
)
def test_bad_event_arguments_raise(args, error, message):
    """Empty or non-str names, non-datetime timestamps and non-mapping data are refused."""
    with pytest.raises(error, match=message):
        Event(*args)


def test_repr_shows_all_fields():
    """The repr names the event, its timestamp and its data."""
    assert repr(Event("e", NOW, {"k": 1})) == (
        "Event(name='e', timestamp=datetime.datetime(2024, 5, 17, 12, 30), data={'k': 1})"
    )


def test_events_compare_by_value():
    """Two events with the same fields are equal; a different field makes them differ."""
    assert Event("e", NOW, {"k": 1}) == Event("e", NOW, {"k": 1})
    assert Event("e", NOW, {"k": 1}) != Event("e", NOW, {"k": 2})
    with pytest.raises(TypeError):
        hash(Event("e", NOW, {}))


def test_log_event_without_handlers_does_nothing(monkeypatch):
    """With no handler registered, log_event returns quietly."""
    monkeypatch.setattr(_event, "_handlers", ())  # other tests' sinks may still be registered
    assert log_event(Event("e", NOW, {})) is None


def test_log_event_rejects_non_events():
    """log_event refuses anything but an Event, naming it."""
    with pytest.raises(TypeError, match="expects an Event, got 'e'"):
        log_event("e")


def test_handlers_run_in_registration_order(register):
    """Each registered handler receives the event, first registered first."""
    calls = []
    register(lambda e: calls.append(("first", e.name)))
    register(lambda e: calls.append(("second", e.name)))
    log_event(Event("e", NOW, {}))
    assert calls == [("first", "e"), ("second", "e")]


def test_unregistered_handlers_are_not_called(register):
    """After unregister_event_handler the handler receives nothing more."""
    calls = []
    handle = register(calls.append)
    log_event(Event("one", NOW, {}))
    unregister_event_handler(handle)
    log_event(Event("two", NOW, {}))
    assert [e.name for e in calls] == ["one"]


def test_unregistering_twice_raises_valueerror(register):
    """A handle can be unregistered once; the second time is an error, not a crash."""
    handle = register(print)
    unregister_event_handler(handle)
    with pytest.raises(ValueError, match="not registered"):
        unregister_event_handler(handle)


def test_unregister_needs_a_handle():
    """Passing the handler itself instead of its handle is a TypeError."""
    with pytest.raises(TypeError, match="expected an EventHandlerHandle"):
        unregister_event_handler(print)


def test_register_needs_a_callable():
    """A non-callable handler is refused."""
    with pytest.raises(TypeError, match="must be callable, got 42"):
        register_event_handler(42)


def failing_handler(event: Event) -> None:
    raise RuntimeError(f"cannot handle {event.name}")


def test_a_raising_handler_is_isolated_and_reported_once(register, caplog):
    """A handler that raises never reaches the caller, the others still run, one log record."""
    calls = []
    register(failing_handler)
    register(calls.append)
    with caplog.at_level(logging.ERROR, logger="tb_monitor"):
        for i in range(3):
            log_event(Event(f"e{i}", NOW, {}))
    assert [e.name for e in calls] == ["e0", "e1", "e2"]
    records = [r for r in caplog.records if r.name == "tb_monitor"]
    assert len(records) == 1
    assert "test_event.failing_handler" in records[0].getMessage()
    assert records[0].exc_info[0] is RuntimeError


def test_each_failing_handler_is_reported(register, caplog):
    """Two failing handlers give one report each."""
    register(failing_handler)
    register(lambda e: 1 / 0)
    with caplog.at_level(logging.ERROR, logger="tb_monitor"):
        log_event(Event("e", NOW, {}))
        log_event(Event("e", NOW, {}))
    assert len([r for r in caplog.records if r.name == "tb_monitor"]) == 2


def test_registration_during_dispatch_applies_to_the_next_event(register):
    """A handler registered while an event is dispatched first sees the next event."""
    late = []

    def registering(event: Event) -> None:
        if event.name == "first":
            register(late.append)

    register(registering)
    log_event(Event("first", NOW, {}))
    log_event(Event("second", NOW, {}))
    assert [e.name for e in late] == ["second"]


def test_concurrent_registration_loses_no_handler():
    """Threads registering and unregistering at once leave exactly the expected handlers."""
    per_thread = 200
    handles: list[list[EventHandlerHandle]] = [[] for _ in range(8)]

    def churn(mine: list[EventHandlerHandle]) -> None:
        for _ in range(per_thread):
            mine.append(register_event_handler(print))
        for handle in mine[: per_thread // 2]:
            unregister_event_handler(handle)

    threads = [threading.Thread(target=churn, args=(mine,)) for mine in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept = [h for mine in handles for h in mine[per_thread // 2 :]]
    try:
        assert set(_event._handlers) == set(kept)
        assert len(_event._handlers) == len(kept)
    finally:
        for handle in kept:
            unregister_event_handler(handle)

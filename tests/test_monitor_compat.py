"""The same scenarios through the real ``torch.monitor`` and through ``tb_monitor``.

Each scenario runs against a module exposing the torch.monitor API and returns what a user would
observe; the tests compare both modules' observations. Torch Stats are always destroyed (which
logs what they hold) before their handler is unregistered: a torch Stat holding samples at
interpreter exit with a Python handler registered crashes torch 2.13 (see test_monitor_exit.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

import tb_monitor
from tb_monitor.contract import STAT_EVENT

HOUR = timedelta(hours=1)
COMPARABLE = ("MEAN", "COUNT", "SUM", "MAX", "MIN")  # torch drops VALUE


@pytest.fixture
def monitor(torch) -> ModuleType:
    """The real torch.monitor."""
    import torch.monitor

    return torch.monitor


def observe(module: ModuleType, scenario: Callable[[ModuleType], Any]) -> tuple[list, Any]:
    """Run ``scenario(module)`` with a handler registered: the Stat events seen, and its result."""
    events: list[tuple[str, dict]] = []
    handle = module.register_event_handler(lambda e: events.append((e.name, dict(e.data))))
    try:
        result = scenario(module)  # its Stats are gone on return, so they logged what they held
    finally:
        module.unregister_event_handler(handle)
    return [e for e in events if e[0] == STAT_EVENT and _ours_or_torch(e)], result


def _ours_or_torch(event: tuple[str, dict]) -> bool:
    # Only the scenario's Stats are named "compat*" / "asdf": other tests' Stats may log meanwhile.
    return all(key.startswith(("compat", "asdf")) for key in event[1])


def both(monitor: ModuleType, scenario: Callable[[ModuleType], Any]) -> tuple[tuple, tuple]:
    return observe(monitor, scenario), observe(tb_monitor, scenario)


def aggregations(module: ModuleType, names=COMPARABLE) -> list:
    return [getattr(module.Aggregation, name) for name in names]


def by_name(values: dict) -> dict[str, float]:
    """A get() result keyed by aggregation name, so torch's and ours compare."""
    return {agg.name: value for agg, value in values.items()}


def test_stat_event_name_matches(monitor):
    """Stat windows are logged under torch's event name."""
    assert STAT_EVENT == monitor.STAT_EVENT == "torch.monitor.Stat"


def test_aggregation_names_match(monitor):
    """Aggregation has the same members as torch's."""
    assert list(tb_monitor.Aggregation.__members__) == list(monitor.Aggregation.__members__)


def test_pytorch_max_samples_scenario(monitor):
    """PyTorch's own test: max_samples=5 logs one window {sum: 10, count: 5} for adds 0..9."""

    def scenario(m):
        stat = m.Stat("asdf", aggregations(m, ("SUM", "COUNT")), HOUR, max_samples=5)
        for i in range(10):
            stat.add(i)
        return stat.count

    torch_seen, ours_seen = both(monitor, scenario)
    assert (
        ours_seen
        == torch_seen
        == ([("torch.monitor.Stat", {"asdf.sum": 10.0, "asdf.count": 5.0})], 0)
    )


def test_window_values_match_for_every_comparable_aggregation(monitor):
    """mean, count, sum, max and min of a window are the same keys and values as torch's."""
    samples = [3, -1.5, 8, 0.25, 2]

    def scenario(m):
        stat = m.Stat("compat_values", aggregations(m), HOUR, max_samples=len(samples))
        for v in samples:
            stat.add(v)

    torch_seen, ours_seen = both(monitor, scenario)
    assert len(torch_seen[0]) == 1
    assert ours_seen[0] == torch_seen[0]


def test_pending_samples_are_logged_when_the_stat_goes_away(monitor):
    """A Stat destroyed with samples in its window logs them, as torch's destructor does."""

    def scenario(m):
        stat = m.Stat("compat_pending", aggregations(m, ("SUM", "MAX")), HOUR)
        stat.add(1.5)
        stat.add(4)

    torch_seen, ours_seen = both(monitor, scenario)
    assert (
        ours_seen[0]
        == torch_seen[0]
        == [("torch.monitor.Stat", {"compat_pending.sum": 5.5, "compat_pending.max": 4.0})]
    )


def test_count_and_get_match(monitor):
    """count during a window, and get() before and after a logged window, agree with torch."""

    def scenario(m):
        stat = m.Stat("compat_get", aggregations(m), HOUR, max_samples=3)
        before = by_name(stat.get())
        stat.add(1)
        stat.add(5)
        count = stat.count
        stat.add(3)
        return before, count, by_name(stat.get())

    (_, (torch_before, torch_count, torch_after)), (_, (ours_before, ours_count, ours_after)) = (
        both(monitor, scenario)
    )
    assert ours_count == torch_count == 2
    assert {k: ours_before[k] for k in COMPARABLE} == torch_before
    assert {k: ours_after[k] for k in COMPARABLE} == torch_after


def test_value_is_reported_where_torch_drops_it(monitor):
    """VALUE (the last sample) is in our events and get(); torch 2.13 reports neither."""

    def scenario(m):
        stat = m.Stat("compat_value", aggregations(m, ("VALUE", "SUM")), HOUR, max_samples=2)
        stat.add(2)
        stat.add(7)
        return by_name(stat.get())

    (torch_events, torch_get), (ours_events, ours_get) = both(monitor, scenario)
    assert torch_events == [("torch.monitor.Stat", {"compat_value.sum": 9.0})]
    assert "VALUE" not in torch_get
    assert ours_events == [
        ("torch.monitor.Stat", {"compat_value.value": 7.0, "compat_value.sum": 9.0})
    ]
    assert ours_get == {"VALUE": 7.0, "SUM": 9.0}


def test_bools_and_numpy_scalars_are_added_alike(monitor):
    """bools and numpy scalars aggregate to the same values in both."""
    np = pytest.importorskip("numpy")
    samples = [True, np.int64(2), np.float32(0.5), np.float64(1.5)]

    def scenario(m):
        stat = m.Stat(
            "compat_numpy", aggregations(m, ("SUM", "COUNT")), HOUR, max_samples=len(samples)
        )
        for v in samples:
            stat.add(v)

    torch_seen, ours_seen = both(monitor, scenario)
    assert (
        ours_seen[0]
        == torch_seen[0]
        == [("torch.monitor.Stat", {"compat_numpy.sum": 5.0, "compat_numpy.count": 4.0})]
    )


@pytest.mark.parametrize("bad", ["1.0", None, object()])
def test_non_numbers_are_refused_by_both(monitor, bad):
    """Both raise TypeError for a non-numeric sample."""

    def scenario(m):
        stat = m.Stat("compat_bad", aggregations(m, ("SUM",)), HOUR)
        with pytest.raises(TypeError):
            stat.add(bad)
        return stat.count

    torch_seen, ours_seen = both(monitor, scenario)
    assert ours_seen == torch_seen == ([], 0)


def test_torch_aggregations_are_accepted(monitor):
    """A Stat built with torch.monitor.Aggregation members works like one built with ours."""
    with tb_monitor.Stat(
        "compat_mixed", [monitor.Aggregation.MEAN, monitor.Aggregation.MAX], HOUR
    ) as stat:
        assert stat.aggregations == [tb_monitor.Aggregation.MEAN, tb_monitor.Aggregation.MAX]


def test_handler_registration_and_unregistration_match(monitor):
    """A handler sees events while registered and none after unregistration, in both."""

    def scenario(m):
        seen = []
        handle = m.register_event_handler(lambda e: seen.append(e.name))
        m.log_event(m.Event("before", datetime.now(), {}))
        m.unregister_event_handler(handle)
        m.log_event(m.Event("after", datetime.now(), {}))
        return seen, type(handle).__name__

    (_, torch_result), (_, ours_result) = both(monitor, scenario)
    assert ours_result == torch_result == (["before"], "EventHandlerHandle")


def test_event_fields_match(monitor):
    """Event name, timestamp and data read back the same; bools stay bools where torch gives 1.0."""
    when = datetime(2024, 5, 17, 12, 30, 15, 250000)
    data = {"text": "hello", "int": 3, "float": 0.5, "flag": True}
    torch_event, ours = monitor.Event("epoch", when, data), tb_monitor.Event("epoch", when, data)
    assert (
        (ours.name, ours.timestamp) == (torch_event.name, torch_event.timestamp) == ("epoch", when)
    )
    assert ours.data == torch_event.data == data  # 1.0 == True
    assert ours.data["flag"] is True and torch_event.data["flag"] == 1.0


def test_handlers_receive_the_logged_event(monitor):
    """log_event hands the very event to the handler in both."""

    def scenario(m):
        received = []
        handle = m.register_event_handler(received.append)
        event = m.Event("compat_event", datetime(2024, 1, 1), {"k": "v"})
        m.log_event(event)
        m.unregister_event_handler(handle)
        return [(e.name, e.timestamp, dict(e.data)) for e in received]

    (_, torch_result), (_, ours_result) = both(monitor, scenario)
    assert ours_result == torch_result == [("compat_event", datetime(2024, 1, 1), {"k": "v"})]


@pytest.mark.parametrize("attribute", ["name", "count"])
def test_name_and_count_are_read_only(monitor, attribute):
    """Assigning a Stat's name or count raises AttributeError in both."""

    def scenario(m):
        stat = m.Stat("compat_readonly", aggregations(m, ("SUM",)), HOUR)
        with pytest.raises(AttributeError):
            setattr(stat, attribute, 3)
        return stat.name

    (_, torch_name), (_, ours_name) = both(monitor, scenario)
    assert ours_name == torch_name == "compat_readonly"

"""Hostile or odd input to the public APIs: accepted and read back exactly, or a clear error.

Property-based (hypothesis): Stat names, metric groups and names, event data values, torchelastic
events and rendezvous events go through the real writer into a logdir and back through the real
readers (``tb_monitor.testing.capture``). A value is either refused on the caller's thread with an
error naming it, or it round-trips exactly. Scalars are TensorBoard ``simple_value`` floats, so
"exactly" for a metric or a Stat window is the value as a float32 (the data contract).
"""

from __future__ import annotations

import json
import math
import struct
from datetime import datetime, timedelta, timezone

import pytest
from conftest import need

from tb_monitor import Aggregation, Event, Stat, contract, log_event
from tb_monitor.elastic import events as elastic_events
from tb_monitor.elastic.events.api import NodeState, RdzvEvent
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.logdir import readers
from tb_monitor.testing import capture, manual_clock

try:
    need("hypothesis")  # fails in CI when missing
except pytest.skip.Exception as skipped:
    pytest.skip(str(skipped), allow_module_level=True)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
WINDOW = timedelta(seconds=10)
ALL_AGGS = [Aggregation.COUNT, Aggregation.SUM, Aggregation.MEAN, Aggregation.MIN, Aggregation.MAX]

#: Names: any unicode without lone surrogates (those are their own tests below), "/", empty, long.
names = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", "/", "a/b/c", "//", " ", "\x00", "\n", "<script>x</script>", "é" * 3000]),
    st.text(alphabet="ab/.", min_size=1000, max_size=5000),
)
float32s = st.floats(width=32, allow_nan=False)
json_scalars = st.one_of(
    st.text(max_size=200),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
refused_values = st.one_of(
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.sets(st.integers(), max_size=2),
    st.none(),
    st.binary(max_size=4),
    st.just(object()),
    st.complex_numbers(allow_nan=False),
)


def f32(value: float) -> float:
    """``value`` as the float32 TensorBoard stores in ``simple_value``."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN and types kept (True is not 1)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def names_it(exc: BaseException, value: object) -> bool:
    text = str(exc)
    return repr(value)[:40] in text or str(value)[:40] in text


# -- Stat ---------------------------------------------------------------------------------------


@PROPERTY
@given(name=names)
def test_stat_names_round_trip_as_their_tags(name):
    """A Stat of any name is refused naming it, or its windows read back under <name>.<agg>."""
    try:
        with manual_clock() as clock, capture() as captured:
            stat = Stat(name, ALL_AGGS, WINDOW)
            stat.add(2.0)
            stat.add(4.0)
            clock.advance(10)
            stat.close()
    except (TypeError, ValueError) as exc:
        assert names_it(exc, name)
        return
    points = {p.tag: p.value for p in captured.scalars()}
    assert points == {
        f"{name}.count": 2.0,
        f"{name}.sum": 6.0,
        f"{name}.mean": 3.0,
        f"{name}.min": 2.0,
        f"{name}.max": 4.0,
    }


@PROPERTY
@given(values=st.lists(float32s | st.sampled_from([math.inf, -math.inf]), min_size=1, max_size=8))
def test_stat_values_aggregate_and_read_back_as_float32(values):
    """Any float32 samples (infinities too) read back as the float32 of their IEEE aggregates."""
    with manual_clock() as clock, capture() as captured:
        stat = Stat("s", [Aggregation.COUNT, Aggregation.MIN, Aggregation.MAX], WINDOW)
        for value in values:
            stat.add(value)
        clock.advance(10)
        stat.close()
    points = {p.tag: p.value for p in captured.scalars()}
    assert points["s.count"] == len(values)
    assert points["s.min"] == f32(min(values)) and points["s.max"] == f32(max(values))


def test_stat_nan_sample_makes_the_window_nan():
    """A NaN sample is never hidden: min, max and mean of its window read back NaN."""
    with manual_clock() as clock, capture() as captured:
        stat = Stat("s", [Aggregation.MEAN, Aggregation.MIN, Aggregation.MAX], WINDOW)
        stat.add(1.0)
        stat.add(math.nan)
        clock.advance(10)
        stat.close()
    assert all(math.isnan(p.value) for p in captured.scalars())
    assert len(captured.scalars()) == 3


@PROPERTY
@given(value=refused_values | st.text(max_size=5))
def test_stat_refuses_values_that_are_not_real_numbers(value):
    """A sample that is not a real number raises TypeError naming the Stat, on the caller."""
    if isinstance(value, str):
        return  # str samples: see test_stat_refuses_str_samples
    with manual_clock(), capture():
        stat = Stat("refuses", [Aggregation.SUM], WINDOW)
        with pytest.raises(TypeError, match="refuses"):
            stat.add(value)
        stat.close()


def test_stat_refuses_str_samples():
    """A str sample raises TypeError naming the Stat (no number parsing of text)."""
    with manual_clock(), capture():
        stat = Stat("text", [Aggregation.SUM], WINDOW)
        with pytest.raises(TypeError, match="text"):
            stat.add("3")
        stat.close()


def test_stat_refuses_an_int_beyond_float_range_naming_it():
    """Stat.add(10**400) raises on the caller's thread, naming the Stat and the value."""
    with manual_clock(), capture():
        stat = Stat("huge", [Aggregation.SUM], WINDOW)
        with pytest.raises((OverflowError, TypeError, ValueError), match="huge"):
            stat.add(10**400)
        stat.close()


def test_stat_name_with_a_lone_surrogate_is_refused_or_kept():
    """A Stat named with a lone surrogate is refused naming it, or its window reaches disk."""
    name = "loss\ud800"
    try:
        with manual_clock() as clock, capture() as captured:
            stat = Stat(name, [Aggregation.COUNT], WINDOW)
            stat.add(1.0)
            clock.advance(10)
            stat.close()
    except (TypeError, ValueError) as exc:
        assert names_it(exc, name)
        return
    assert [p.tag for p in captured.scalars()] == [f"{name}.count"]


# -- put_metric ---------------------------------------------------------------------------------


@PROPERTY
@given(group=names, name=names)
def test_metric_groups_and_names_round_trip_as_their_tag(group, name):
    """Any metric group and name is refused naming it, or reads back as the tag <group>/<name>."""
    try:
        with capture() as captured:
            put_metric(name, 7, group)
    except (TypeError, ValueError) as exc:
        assert names_it(exc, name) or names_it(exc, group)
        return
    assert [(p.tag, p.value) for p in captured.scalars()] == [(f"{group}/{name}", 7.0)]


@PROPERTY
@given(
    value=float32s
    | st.integers(min_value=-(2**24), max_value=2**24)
    | st.booleans()
    | st.sampled_from([math.inf, -math.inf])
)
def test_metric_values_representable_as_float32_round_trip_exactly(value):
    """A metric value that a float32 holds exactly reads back exactly."""
    with capture() as captured:
        put_metric("m", value, "g")
    [point] = captured.scalars()
    assert point.value == float(value)


def test_metric_nan_reads_back_nan():
    """A NaN metric is kept as NaN."""
    with capture() as captured:
        put_metric("m", math.nan, "g")
    [point] = captured.scalars()
    assert math.isnan(point.value)


@PROPERTY
@given(value=refused_values)
def test_metric_refuses_values_that_are_not_real_numbers(value):
    """A metric value that is not a real number raises TypeError naming the metric."""
    with capture(), pytest.raises(TypeError, match="g/m"):
        put_metric("m", value, "g")


def test_metric_refuses_str_values():
    """A str metric value is refused naming the metric, not parsed as a number."""
    with capture(), pytest.raises(TypeError, match="g/m"):
        put_metric("m", "3", "g")


def test_metric_int_beyond_float_range_is_refused():
    """put_metric with 10**400 raises on the caller's thread naming the metric."""
    with capture() as captured:
        try:
            put_metric("m", 10**400, "g")
        except (OverflowError, TypeError, ValueError) as exc:
            assert "g/m" in str(exc)
            return
    assert [p.value for p in captured.scalars()] == [10**400]


@PROPERTY
@given(value=st.integers(min_value=2**24 + 1, max_value=2**62) | st.floats(1e39, 1e300))
def test_metric_values_beyond_float32_read_back_as_float32(value):
    """Scalars are float32 by TensorBoard's data contract (simple_value): a value beyond it reads
    back as the float32 nearest to it, an infinity past float32's range."""
    with capture() as captured:
        put_metric("m", value, "g")
    expected = struct.unpack("<f", struct.pack("<f", value))[0] if value < 3.4e38 else math.inf
    assert [p.value for p in captured.scalars()] == [expected]


def test_metric_name_with_a_lone_surrogate_is_refused_or_kept():
    """A metric named with a lone surrogate is refused naming it, or reaches disk."""
    try:
        with capture() as captured:
            put_metric("m\udfff", 1, "g")
    except (TypeError, ValueError) as exc:
        assert "m\\udfff" in str(exc) or "m\udfff" in str(exc)
        return
    assert [p.tag for p in captured.scalars()] == ["g/m\udfff"]


# -- torch.monitor events -----------------------------------------------------------------------


@PROPERTY
@given(
    name=names.filter(bool),
    data=st.dictionaries(st.text(max_size=30), json_scalars, max_size=6),
)
def test_monitor_event_data_round_trips_exactly(name, data):
    """Any name and str/int/float/bool data (huge ints, NaN, inf) read back exactly, types kept."""
    when = datetime(2025, 3, 3, 11, 0, 0, 123456, tzinfo=timezone.utc)
    with capture() as captured:
        log_event(Event(name, when, data))
    [row] = captured.events(contract.MONITOR)
    assert row["name"] == name
    assert row["metadata"].keys() == data.keys()
    assert all(same(row["metadata"][k], v) for k, v in data.items()), (row["metadata"], data)
    assert row["wall_time"] == pytest.approx(when.timestamp(), abs=1e-6)


@PROPERTY
@given(key=st.text(max_size=10), value=refused_values)
def test_monitor_event_refuses_nested_and_other_values_naming_the_key(key, value):
    """A data value that is not str, int, float or bool raises TypeError naming its key."""
    with pytest.raises(TypeError) as info:
        Event("e", datetime.now(), {key: value})
    assert repr(key) in str(info.value)


@pytest.mark.parametrize("key", [1, None, b"k", ("a",)])
def test_monitor_event_refuses_keys_that_are_not_str(key):
    """A data key that is not a str raises TypeError naming it."""
    with pytest.raises(TypeError) as info:
        Event("e", datetime.now(), {key: 1})
    assert repr(key) in str(info.value)


def test_monitor_event_refuses_an_empty_name():
    """An empty event name raises ValueError."""
    with pytest.raises(ValueError, match="name"):
        Event("", datetime.now(), {})


def test_monitor_event_with_a_lone_surrogate_keeps_its_text():
    """An event whose data holds a lone surrogate keeps both its timeline record and its text."""
    with capture() as captured:
        log_event(Event("e", datetime.now(), {"s": "\ud800"}))
    assert [row["metadata"] for row in captured.events(contract.MONITOR)] == [{"s": "\ud800"}]
    assert len(captured.texts()) == 1


# -- torchelastic events and rendezvous events --------------------------------------------------

metadata_values = st.one_of(
    st.text(max_size=100),
    st.integers(min_value=-(2**100), max_value=2**100),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)


def _payloads(captured, kind: str) -> list[str]:
    captured._monitor.flush()
    return [r.payload for r in readers.iter_timeline(captured._monitor.logdir) if r.kind == kind]


@PROPERTY
@given(
    name=names,
    source=st.sampled_from(list(elastic_events.EventSource)),
    metadata=st.dictionaries(
        st.text(max_size=20).filter(lambda k: k not in ("metadata",)), metadata_values, max_size=6
    ),
)
def test_elastic_event_round_trips_exactly(name, source, metadata):
    """A torchelastic Event with any name, source and metadata is read back equal to itself."""
    event = elastic_events.Event(name, source, timestamp=1_741_000_000, metadata=metadata)
    with capture() as captured:
        elastic_events.record(event, "tensorboard")
        payloads = _payloads(captured, contract.AGENT) + _payloads(captured, contract.WORKER)
    assert [elastic_events.Event.deserialize(p) for p in payloads] == [event]


@PROPERTY
@given(key=st.text(max_size=10), value=refused_values.filter(lambda v: v is not None))
def test_elastic_event_refuses_nested_metadata_naming_the_key(key, value):
    """A metadata value that is not str, int, float, bool or None raises naming its key."""
    with pytest.raises((TypeError, ValueError)) as info:
        elastic_events.Event("e", elastic_events.EventSource.AGENT, metadata={key: value})
    assert repr(key) in str(info.value) or key in str(info.value)


rdzv_strings = st.text(max_size=300) | st.sampled_from(["", "<img src=x onerror=alert(1)>"])
rdzv_ints = st.integers(min_value=-(2**70), max_value=2**70)


@PROPERTY
@given(
    name=rdzv_strings,
    run_id=rdzv_strings,
    message=rdzv_strings,
    hostname=rdzv_strings,
    pid=rdzv_ints,
    state=st.sampled_from(list(NodeState)),
    master_endpoint=rdzv_strings,
    rank=st.none() | rdzv_ints,
    local_id=st.none() | rdzv_ints,
    error_trace=rdzv_strings,
)
def test_rdzv_event_round_trips_exactly(
    name, run_id, message, hostname, pid, state, master_endpoint, rank, local_id, error_trace
):
    """A RdzvEvent with any field values reads back equal to itself, and field by field."""
    event = RdzvEvent(
        name, run_id, message, hostname, pid, state, master_endpoint, rank, local_id, error_trace
    )
    with capture() as captured:
        elastic_events.record_rdzv_event(event)
        payloads = _payloads(captured, contract.RENDEZVOUS)
    assert [RdzvEvent.deserialize(p) for p in payloads] == [event]
    [row] = captured.events(contract.RENDEZVOUS)
    assert (row["name"], row["run_id"], row["message"], row["hostname"]) == (
        name,
        run_id,
        message,
        hostname,
    )
    assert (row["pid"], row["rank"], row["local_id"]) == (pid, rank, local_id)
    assert row["state"] == state.name and row["error_trace"] == error_trace


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pid", "123"),
        ("pid", 1.5),
        ("rank", "0"),
        ("local_id", [0]),
        ("hostname", 7),
        ("message", None),
        ("node_state", "NOT_A_STATE"),
    ],
)
def test_rdzv_event_refuses_fields_of_the_wrong_type_naming_them(field, value):
    """A RdzvEvent field of the wrong type raises naming the field and the value."""
    fields = dict(name="n", run_id="r", message="m", hostname="h", pid=1, node_state="INIT")
    fields[field] = value
    with pytest.raises((TypeError, ValueError)) as info:
        RdzvEvent(**fields)
    assert field in str(info.value) and repr(value) in str(info.value)


@PROPERTY
@given(run_id=rdzv_strings, message=rdzv_strings, rank=st.none() | rdzv_ints)
def test_construct_and_record_rdzv_event_round_trips(run_id, message, rank):
    """construct_and_record_rdzv_event records one rendezvous event holding the fields given."""
    with capture() as captured:
        elastic_events.construct_and_record_rdzv_event(
            run_id, message, NodeState.RUNNING, name="n", hostname="h", pid=5, rank=rank
        )
    [row] = captured.events(contract.RENDEZVOUS)
    assert (row["run_id"], row["message"], row["rank"], row["pid"]) == (run_id, message, rank, 5)
    assert json.loads(json.dumps(row["metadata"])) == row["metadata"]

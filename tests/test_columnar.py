"""Content versions 4 and 5 (columns): any events round-trip byte for byte, a damaged record is
named, version 5's steps read as version 4's offsets, distinct keep-alives share a record, and
versions 1, 3 and 5 read back as the same DataFrame."""

from __future__ import annotations

import json

import pytest
from conftest import need
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_monitor import contract
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.logdir import readers
from tb_monitor.sinks import summaries
from tb_monitor.sinks.batching import TimelineBatcher
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin.columnar_merge import merge_columnar

T0 = 1_700_000_000.0
_AFFIXED = st.builds("a long common start {} and its end".format, st.text(max_size=3))
_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8) | _AFFIXED
_VALUES = st.recursive(
    _SCALARS | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_OBJECTS = st.dictionaries(
    st.sampled_from(["name", "message", "a", "b", "é", ""]), _VALUES, max_size=5
)


def _rdzv(message: str, name: str = "DynamicRendezvousHandler._keep_alive") -> str:
    return RdzvEvent(name, "job", message, "node-0", 4000, "RUNNING", local_id=0).serialize()


def _events(strings: list[str]) -> list[tuple[float, str]]:
    return contract.record_events(strings, 0.0, True)


@settings(max_examples=60, deadline=None)
@given(
    objects=st.lists(_OBJECTS, min_size=1, max_size=6),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=20),
    offsets=st.lists(st.integers(0, 10**9), min_size=20, max_size=20),
)
def test_any_events_round_trip_byte_for_byte(objects, picks, offsets):
    """Every event comes back with its time (to the µs) and the exact JSON it was written as."""
    payloads = [json.dumps(obj) for obj in objects]
    ids = [p % len(payloads) for p in picks]
    times = [T0 + offsets[i] * 1e-6 for i in range(len(ids))]
    strings = contract.encode_columnar(times, payloads, ids)
    expected = [(pytest.approx(t, abs=1e-6), payloads[i]) for t, i in zip(times, ids, strict=True)]
    assert _events(strings) == expected
    found = contract.decode_records([(strings, 0.0, True)], columnar=True).columnar
    merged = merge_columnar([record for _, record in found])
    assert [merged.payload(e) for e in range(len(merged))] == [payloads[i] for i in ids]


@settings(max_examples=60, deadline=None)
@given(
    objects=st.lists(_OBJECTS, min_size=1, max_size=6),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=20),
)
def test_any_events_read_as_objects_are_what_their_json_holds(objects, picks):
    """Read as objects (no JSON text made), every event is the object its JSON parses to."""
    payloads = [json.dumps(obj) for obj in objects]
    ids = [p % len(payloads) for p in picks]
    strings = contract.encode_columnar([T0 + i for i in range(len(ids))], payloads, ids)
    read = contract.record_events(strings, 0.0, True, objects=True)
    assert [obj for _, obj in read] == [json.loads(payloads[i]) for i in ids]


@pytest.mark.parametrize("payload", ['{"a": 1,"b": 2}', '{"a": 1, "a": 2}', "[1]", "not json"])
def test_a_payload_json_dumps_would_not_give_back_is_left_to_version_3(payload):
    """A payload that is no JSON object as json.dumps writes it makes no version-4 record."""
    assert contract.encode_columnar([T0], [payload], [0]) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda index, values: ({**index, "ix": {"message": "AAAA"}}, values),  # 3 bytes, 2 events
        lambda index, values: (index, _columns(values, shapes=[["name"]])),  # other columns
        lambda index, values: (index, _columns(values, message=[])),
        lambda index, values: (index, "[1]"),
        lambda index, values: (index, _columns(values, name={"affix": 1})),
        lambda index, values: ({**index, "dd_le32": "AAAA"}, values),  # 3 bytes: no whole step
        lambda index, values: ({**index, "dd_le32": "AAAAAAAAAAA="}, values),  # 3 events' steps
        lambda index, values: ({"t0": T0, "ix": index["ix"]}, values),  # no times at all
    ],
)
def test_a_damaged_columnar_record_is_named(damage):
    """A version-4 record whose index does not describe its values raises a ValueError."""
    index, values = contract.encode_columnar([T0, T0 + 1], [_rdzv("a"), _rdzv("b")], [0, 1])
    index, values = damage(json.loads(index), values)
    with pytest.raises(ValueError, match="columnar"):
        _events([json.dumps(index), values])


@settings(max_examples=80, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 2**33) | st.integers(0, 10**7), min_size=1, max_size=30),
    back=st.booleans(),
)
def test_version_5_steps_read_as_the_offsets_of_version_4(gaps, back):
    """Times in order with gaps under 71 min are stored as uint32 steps (else as int64
    offsets), and read back as the very doubles version 4's offsets of the same times give."""
    offsets = [sum(gaps[: i + 1]) - gaps[0] for i in range(len(gaps))]
    if back and len(offsets) > 1:
        offsets[-1] = offsets[-2] - 1  # an event before the one before it
    times = [T0 + offset * 1e-6 for offset in offsets]
    index, values = contract.encode_columnar(times, [_rdzv("a")], [0] * len(times))
    parsed = json.loads(index)
    stepped = all(0 <= b - a < 2**32 for a, b in zip(offsets[:-1], offsets[1:], strict=True))
    assert ("dd_le32" in parsed) == stepped and ("dt_le64" in parsed) != stepped
    written = [round((t - T0) * 1e6) for t in times]
    version_4 = {"t0": T0, "dt_le64": _int64_base64(written), "ix": parsed["ix"]}
    assert [t for t, _ in _events([index, values])] == [
        t for t, _ in _events([json.dumps(version_4), values])
    ]


def test_records_of_both_time_forms_merge_as_each_alone():
    """One merge of stepped and offset records gives each record's own times."""
    runs = [[T0, T0 + 5], [T0 + 9, T0 + 3], [T0 + 1], [T0 + 2, T0 + 2, T0 + 4000]]
    records = []
    for times in runs:
        strings = contract.encode_columnar(times, [_rdzv("a")], [0] * len(times))
        records += [r for _, r in contract.decode_records([(strings, 0.0, True)], True).columnar]
    merged = merge_columnar(records).times.tolist()
    alone = [t for r in records for t in merge_columnar([r]).times.tolist()]
    assert merged == alone == pytest.approx([t for times in runs for t in times], abs=1e-6)


def _int64_base64(values: list[int]) -> str:
    import base64

    import numpy as np

    return base64.b64encode(np.asarray(values, dtype="<i8").tobytes()).decode()


def _columns(values: str, shapes: list | None = None, **columns) -> str:
    """``values`` with some columns (or the shapes) replaced."""
    doc = json.loads(values)
    doc["columns"].update(columns)
    return json.dumps({**doc, "shapes": shapes or doc["shapes"]})


def test_distinct_keep_alives_share_one_record():
    """Keep-alives that differ (a count in their message) still form one run, one record."""
    batcher = TimelineBatcher(run_s=60.0, clock=lambda: 0.0)
    tag = contract.timeline_tag(contract.RENDEZVOUS)
    for i in range(10):
        batcher.add(tag, _rdzv(f"beat {i}"), T0 + i)
    (batch,) = batcher.take(seal=True)
    assert len(batch.payloads) == 10


def test_a_columnar_record_stores_each_distinct_value_once():
    """Ten distinct keep-alives store their host once, and of their messages only what differs
    (the count) around the start and end they share."""
    payloads = [_rdzv(f"node-0 sent heartbeat {i} to the rendezvous") for i in range(10)]
    index, values = contract.encode_columnar([T0 + i for i in range(10)], payloads, list(range(10)))
    columns = json.loads(values)["columns"]
    assert columns["hostname"] == ["node-0"]
    assert columns["message"] == {
        "affix": ["node-0 sent heartbeat ", " to the rendezvous"],
        "middles": [str(i) for i in range(10)],
    }
    assert set(json.loads(index)["ix"]) == {"message"}
    assert [p for _, p in _events([index, values])] == payloads


def _payloads() -> list[tuple[str, str, float]]:
    join = _rdzv("joined", "DynamicRendezvousHandler.next_rendezvous")
    agent = json.dumps(
        {
            "name": "torchelastic.worker.status.SUCCEEDED",
            "source": "AGENT",
            "timestamp": 0,
            "metadata": {"state": "SUCCEEDED", "hostname": "n0"},
        }
    )
    monitor = json.dumps({"name": "loss", "timestamp": T0, "data": {"x": 1.5}})
    out = [(contract.RENDEZVOUS, join, T0), (contract.AGENT, agent, T0 + 0.5)]
    out += [(contract.RENDEZVOUS, _rdzv(f"beat {i}"), T0 + 1 + i) for i in range(5)]
    return [*out, (contract.MONITOR, monitor, T0 + 7.25)]


def _write(logdir, version: int) -> None:
    """The same events as content version 1 (a record each), 3 or 4 (a record per kind)."""
    events = _payloads()
    with AsyncWriter(logdir) as writer:
        if version == 1:
            for kind, payload, t in events:
                writer.add_summary(summaries.timeline_summary(kind, payload), wall_time=t)
            return
        for kind in dict.fromkeys(k for k, _, _ in events):
            times = [t for k, _, t in events if k == kind]
            payloads = [p for k, p, _ in events if k == kind]
            ids = list(range(len(payloads)))
            if version == 3:
                strings = [contract.encode_batch(times, ids), *payloads]
            else:
                strings = contract.encode_columnar(times, payloads, ids)
            summary = summaries.timeline_batch_summary(kind, strings[0], strings[1:])
            writer.add_summary(summary, wall_time=times[0])


def test_versions_1_3_and_5_read_back_as_the_same_dataframe(tmp_path):
    """read_events gives the same DataFrame for the same events in any content version."""
    pandas = need("pandas")
    frames = []
    for version in (1, 3, 4):
        _write(tmp_path / str(version), version)
        frame = readers.read_events(tmp_path / str(version))
        frames.append(frame.sort_values("wall_time", kind="stable").reset_index(drop=True))
    assert len(frames[0]) == len(_payloads())
    for frame in frames[1:]:
        pandas.testing.assert_frame_equal(frame, frames[0])

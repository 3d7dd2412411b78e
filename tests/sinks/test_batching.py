"""Content versions 2 and 3: timeline events gathered into records, keep-alives into runs, every
event still read back on its own; version-1 logdirs still load."""

from __future__ import annotations

import base64
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event, RdzvEvent
from tb_monitor.logdir import readers
from tb_monitor.sinks import TensorboardLoggingHandler, summaries
from tb_monitor.sinks.batching import TimelineBatcher
from tb_monitor.sinks.writer import AsyncWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugin"))
from plugin_helpers import refreshed_store  # noqa: E402

RDZV = contract.timeline_tag(contract.RENDEZVOUS)
T0 = 1_700_000_000.0


def _rdzv(name: str, state: str = "RUNNING", node: str = "node-0") -> str:
    return RdzvEvent(name, "job", "m", node, 4000, state, local_id=0).serialize()


BEAT = _rdzv("DynamicRendezvousHandler._keep_alive")
JOIN = _rdzv("DynamicRendezvousHandler.next_rendezvous")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_keep_alives_form_one_record_per_run_of_event_time():
    """Two minutes of 5-s keep-alives with 60-s runs make two runs, each payload stored once."""
    batcher = TimelineBatcher(run_s=60.0, clock=Clock())
    for i in range(24):
        batcher.add(RDZV, BEAT, T0 + 5.0 * i)
    batches = batcher.take(seal=True)
    assert [len(b.times) for b in batches] == [12, 12]
    assert all(b.payloads == [BEAT] for b in batches)


def test_an_open_run_is_taken_once_the_clock_says_it_is_old():
    """A live job's run is written run_s after it opened, though its span is short."""
    clock = Clock()
    batcher = TimelineBatcher(run_s=60.0, clock=clock)
    batcher.add(RDZV, BEAT, T0)
    assert batcher.take() == []
    clock.now = 60.0
    [batch] = batcher.take()
    assert batch.times == [T0]


def test_other_events_of_a_drain_form_one_record_per_tag():
    """Events that are not keep-alives are taken at once, one batch per tag, repeats stored once."""
    batcher = TimelineBatcher(run_s=60.0, clock=Clock())
    batcher.add(RDZV, JOIN, T0)
    batcher.add(RDZV, JOIN, T0 + 1)
    batcher.add(RDZV, BEAT, T0 + 2)
    [batch] = batcher.take()
    assert (batch.times, batch.payload_ids, batch.payloads) == ([T0, T0 + 1], [0, 0], [JOIN])
    assert len(batcher) == 1  # the keep-alive waits in its run


def test_a_caller_that_decoded_the_event_says_whether_it_is_a_keep_alive():
    """``heartbeat`` given, the batcher takes the caller's word and parses no payload: a run for
    True, at once for False."""
    batcher = TimelineBatcher(run_s=60.0, clock=Clock())
    batcher._is_heartbeat = None  # reading the payload would raise here
    batcher.add(RDZV, "join", T0, heartbeat=False)
    batcher.add(RDZV, "beat", T0 + 1, heartbeat=True)
    [batch] = batcher.take()
    assert (batch.payloads, batcher.open_runs) == (["join"], 1)


def test_the_logging_handler_hands_its_keep_alive_verdict_to_the_writer(tmp_path):
    """The handler decoded each event: the writer is told which are keep-alives."""
    told = []
    with AsyncWriter(tmp_path) as writer:
        add_timeline = writer.add_timeline
        writer.add_timeline = lambda *args, **kw: (told.append(kw), add_timeline(*args, **kw))
        handler = TensorboardLoggingHandler(writer)
        for payload in (JOIN, BEAT):
            handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, payload, None, None))
    assert told == [{"heartbeat": False}, {"heartbeat": True}]


_NAMES = st.sampled_from(
    ["DynamicRendezvousHandler._keep_alive", "x._keep_alive", "_keep_alive", "keep_alive", "join"]
) | st.text(max_size=12)
_EVENTS = st.builds(
    lambda name, state, node: RdzvEvent(name, "job", "m", node, 1, state),
    _NAMES,
    st.sampled_from(["INIT", "RUNNING", "SUCCEEDED", "FAILED"]),
    st.sampled_from(["node-0", "node-1"]),
) | st.builds(
    lambda name, source, state: Event(name, source, 0, {"state": state}),
    _NAMES,
    st.sampled_from(["AGENT", "WORKER"]),
    st.sampled_from(["RUNNING", "SUCCEEDED"]),
)


@settings(max_examples=60, deadline=None)
@given(_EVENTS)
@example(RdzvEvent("DynamicRendezvousHandler._keep_alive", "job", "m", "node-0", 1, "RUNNING"))
@example(Event("DynamicRendezvousHandler._keep_alive", "WORKER", 0, {"state": "RUNNING"}))
def test_the_handlers_keep_alive_verdict_is_the_one_the_payload_gives(event):
    """Whatever the torchelastic event, what the handler tells the writer is what the batcher
    reads from the payload when nobody tells it."""
    told = []
    with tempfile.TemporaryDirectory() as run_dir, AsyncWriter(run_dir) as writer:
        add_timeline = writer.add_timeline
        writer.add_timeline = lambda kind, payload, wall_time, **kw: (
            told.append((kind, payload, kw["heartbeat"])),
            add_timeline(kind, payload, wall_time, **kw),
        )
        record = logging.LogRecord("x", logging.INFO, __file__, 1, event.serialize(), None, None)
        TensorboardLoggingHandler(writer).emit(record)
    [(kind, payload, heartbeat)] = told
    batcher = TimelineBatcher(run_s=60.0, clock=Clock())
    assert heartbeat == batcher._is_heartbeat(contract.timeline_tag(kind), payload)


def test_a_non_positive_run_length_is_rejected():
    """A run length that is not positive is an error naming it."""
    with pytest.raises(ValueError, match="-1"):
        TimelineBatcher(run_s=-1)


def test_flush_writes_the_open_runs(tmp_path):
    """flush() seals every open run of keep-alives: every event is on disk, in its own time."""
    with AsyncWriter(tmp_path) as writer:
        for i in range(30):
            writer.add_timeline(contract.RENDEZVOUS, BEAT, T0 + 5.0 * i)
        writer.flush()
        got = [(r.wall_time, r.payload) for r in readers.iter_timeline(tmp_path)]
    assert got == [(pytest.approx(T0 + 5.0 * i, abs=1e-6), BEAT) for i in range(30)]


def test_a_batch_records_times_to_the_microsecond(tmp_path):
    """Each event of a batch keeps its own wall time within a microsecond."""
    times = [T0 + 0.1234567 * i for i in range(50)]
    with AsyncWriter(tmp_path) as writer:
        for t in times:
            writer.add_timeline(contract.MONITOR, json.dumps({"name": "x", "data": {}}), t)
    got = [r.wall_time for r in readers.iter_timeline(tmp_path)]
    assert got == [pytest.approx(t, abs=1e-6) for t in times]


def test_a_version_1_logdir_still_loads(tmp_path):
    """Records of one event each (content version 1) read back in our readers and the store."""
    payloads = [_rdzv(f"DynamicRendezvousHandler.step_{i}") for i in range(5)]
    with AsyncWriter(tmp_path) as writer:
        for i, payload in enumerate(payloads):
            summary = summaries.timeline_summary(contract.RENDEZVOUS, payload)
            writer.add_summary(summary, wall_time=T0 + i)
    assert [r.payload for r in readers.iter_timeline(tmp_path)] == payloads
    store = refreshed_store(tmp_path)
    assert sorted(store.snapshot().columns.t.tolist()) == [T0 + i for i in range(5)]


def test_a_version_1_run_continued_in_version_2_loads_whole(tmp_path):
    """A restarted writer continuing a version-1 run: the store holds both versions' events."""
    with AsyncWriter(tmp_path) as writer:
        writer.add_summary(summaries.timeline_summary(contract.RENDEZVOUS, JOIN), wall_time=T0)
    with AsyncWriter(tmp_path) as writer:
        writer.add_timeline(contract.RENDEZVOUS, BEAT, T0 + 5)
        writer.add_timeline(contract.RENDEZVOUS, BEAT, T0 + 10)
    store = refreshed_store(tmp_path)
    assert store.snapshot().columns.t.tolist() == [T0, T0 + 5, T0 + 10]


def test_an_index_that_does_not_match_its_payloads_is_left_out_and_named():
    """decode_records leaves out a batch whose positions point past its payloads, names it,
    and keeps the records around it."""
    good = [contract.encode_batch([T0, T0 + 5], [0, 0]), BEAT]
    bad = [json.dumps({"t0": T0, "dt": [0, 1], "p": [0, 3]}), BEAT]
    decoded = contract.decode_records([(good, T0, True), (bad, T0, True), (good, T0, True)])
    assert decoded.record.tolist() == [0, 0, 2, 2]
    assert [
        (position, "does not describe its 1 payloads" in why) for position, why in decoded.errors
    ] == [(1, True)]


def test_a_record_whose_tensor_could_not_be_read_is_left_out_with_why():
    """An ``Unreadable`` record (a reader refused its tensor), batched or not and pickled, is
    named with its reason; the records around it are kept."""
    import pickle

    good = [contract.encode_batch([T0], [0]), BEAT]
    unreadable = pickle.loads(pickle.dumps(contract.Unreadable("cannot reshape 2 into (3,)")))
    records = [(good, T0, True), (unreadable, T0, False), (good, T0, True), (unreadable, T0, True)]
    decoded = contract.decode_records(records)
    assert decoded.record.tolist() == [0, 2]
    assert decoded.errors == [(1, "cannot reshape 2 into (3,)"), (3, "cannot reshape 2 into (3,)")]


def _index(t0: float, offsets: list[int], positions: list[int], version: int) -> str:
    """A batch index as content version 2 (JSON lists) or 3 (base64 little-endian) writes it."""
    if version == 2:
        return json.dumps({"t0": t0, "dt": offsets, "p": positions})
    return json.dumps(
        {
            "t0": t0,
            "dt_le64": base64.b64encode(np.asarray(offsets, "<i8").tobytes()).decode(),
            "p_le32": base64.b64encode(np.asarray(positions, "<u4").tobytes()).decode(),
        }
    )


@pytest.mark.parametrize("positions", [[0.0], [True], ["0"], [None]])
def test_version_2_positions_that_are_not_integers_are_rejected(positions):
    """A version-2 index whose positions are not JSON integers (floats, booleans, strings) is bad."""
    index = json.dumps({"t0": T0, "dt": [0], "p": positions})
    with pytest.raises(ValueError, match="not integers"):
        contract.record_events([index, BEAT], T0, True)


@pytest.mark.parametrize(
    "index",
    [
        {"t0": T0, "dt_le64": "AAAA"},  # 3 bytes: no whole int64
        {"t0": T0, "dt_le64": "not base64!"},
        {"t0": T0, "dt_le64": base64.b64encode(bytes(16)).decode(), "p_le32": "AAAAAA=="},
        {"t0": "noon", "dt_le64": base64.b64encode(bytes(8)).decode()},
    ],
)
def test_a_damaged_version_3_index_is_named(index):
    """A version-3 index whose arrays are cut short, not base64, or whose t0 is no number is bad."""
    with pytest.raises(ValueError, match="does not describe its 1 payloads"):
        contract.record_events([json.dumps(index), BEAT], T0, True)


def test_version_2_and_3_indexes_give_the_same_events():
    """A record written by content version 2 (JSON lists) reads exactly as its version-3 twin."""
    offsets, positions = [0, 5_000_001, 9_999_999], [1, 0, 1]
    events = [
        contract.record_events([_index(T0, offsets, positions, version), BEAT, JOIN], T0, True)
        for version in (2, 3)
    ]
    assert events[0] == events[1] == [(T0, JOIN), (T0 + 5.000001, BEAT), (T0 + 9.999999, JOIN)]


def test_the_writer_leaves_out_positions_when_every_event_is_the_first_payload():
    """A run of keep-alives stores no positions (``p_le32``): every event is payload 0."""
    index = json.loads(contract.encode_batch([T0, T0 + 5, T0 + 10], [0, 0, 0]))
    assert set(index) == {"t0", "dt_le64"}
    assert contract.record_events([json.dumps(index), BEAT], T0, True) == [
        (T0, BEAT),
        (T0 + 5, BEAT),
        (T0 + 10, BEAT),
    ]


@given(
    t0=st.floats(1e9, 2e9),
    offsets=st.lists(st.integers(0, 10**11), min_size=1, max_size=50),
    records=st.integers(1, 4),
    version=st.sampled_from([2, 3]),
)
def test_decoded_times_are_the_doubles_python_computes(t0, offsets, records, version):
    """decode_records' vectorized times equal t0 + dt * 1e-6 computed one event at a time."""
    index = _index(t0, offsets, [0] * len(offsets), version)
    decoded = contract.decode_records([([index, BEAT], 0.0, True)] * records)
    assert decoded.times.tolist() == [t0 + d * 1e-6 for d in offsets] * records
    assert decoded.payload.tolist() == [r for r in range(records) for _ in offsets]


def test_keep_alives_get_no_text_line(tmp_path):
    """The Text tab lists rendezvous events but not keep-alives (they are on the timeline)."""
    with AsyncWriter(tmp_path) as writer:
        handler = TensorboardLoggingHandler(writer)
        for payload in (JOIN, BEAT, BEAT):
            record = logging.LogRecord("x", logging.INFO, __file__, 1, payload, None, None)
            handler.emit(record)
    texts = [
        value.tag
        for event in readers.iter_run_events(tmp_path)
        for value in event.summary.value
        if value.metadata.plugin_data.plugin_name == "text"
    ]
    assert texts == ["events/rendezvous"]
    assert len(list(readers.iter_timeline(tmp_path))) == 3


def test_a_bad_duration_in_the_environment_warns_and_keeps_the_default(monkeypatch, caplog):
    """A typo in a TB_MONITOR_*_S variable is a warning naming it, never an import error."""
    from tb_monitor import _env

    monkeypatch.setenv("TB_MONITOR_HEARTBEAT_RUN_S", "five minutes")
    with caplog.at_level(logging.WARNING):
        assert _env.seconds("TB_MONITOR_HEARTBEAT_RUN_S", 300.0) == 300.0
    assert "TB_MONITOR_HEARTBEAT_RUN_S" in caplog.text and "'five minutes'" in caplog.text
    monkeypatch.setenv("TB_MONITOR_HEARTBEAT_RUN_S", "60")
    assert _env.seconds("TB_MONITOR_HEARTBEAT_RUN_S", 300.0) == 60.0

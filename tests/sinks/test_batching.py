"""Content version 2: timeline events gathered into records, keep-alives into runs, every
event still read back on its own; version-1 logdirs still load."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from tb_monitor import contract
from tb_monitor.elastic.events.api import RdzvEvent
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


def test_an_index_that_does_not_match_its_payloads_is_rejected():
    """decode_batch names a batch whose positions point past its payloads."""
    index = json.dumps({"t0": T0, "dt": [0, 1], "p": [0, 3]})
    with pytest.raises(ValueError, match="does not describe its 1 payloads"):
        contract.decode_batch([index, BEAT])


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

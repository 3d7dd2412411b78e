"""Notebook readers: scalars and timeline events of every run, as DataFrames and iterators."""

from __future__ import annotations

import json
import sys

import pytest

from tb_monitor import contract
from tb_monitor.logdir import readers
from tb_monitor.sinks.writer import AsyncWriter


def test_read_scalars_names_runs_relative_to_the_logdir(logdir):
    """Files in the logdir itself are run '.', nested ones their relative path."""
    with AsyncWriter(logdir) as top, AsyncWriter(logdir / "job" / "rank-1") as nested:
        top.add_scalar("loss", 1.0, wall_time=10.0)
        nested.add_scalar("loss", 2.0, wall_time=11.0)
        nested.add_scalar("loss", 3.0, wall_time=12.0)
    frame = readers.read_scalars(logdir)
    assert list(frame.columns) == ["run", "tag", "step", "wall_time", "value"]
    assert frame.to_dict("records") == [
        {"run": ".", "tag": "loss", "step": 0, "wall_time": 10.0, "value": 1.0},
        {"run": "job/rank-1", "tag": "loss", "step": 0, "wall_time": 11.0, "value": 2.0},
        {"run": "job/rank-1", "tag": "loss", "step": 1, "wall_time": 12.0, "value": 3.0},
    ]


def test_read_scalars_of_an_empty_logdir_has_the_columns(logdir):
    """An empty logdir gives an empty frame with the documented columns."""
    frame = readers.read_scalars(logdir)
    assert frame.empty and list(frame.columns) == ["run", "tag", "step", "wall_time", "value"]


def test_missing_logdir_is_named(tmp_path):
    """A logdir that does not exist raises FileNotFoundError naming it."""
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        readers.read_scalars(tmp_path / "nope")


def test_read_events_decodes_every_kind_sorted_by_time(logdir, torch):
    """Torch's own serialized events of each kind come back decoded, sorted by wall time."""
    import torch.distributed.elastic.events.api as torch_events

    rdzv = torch_events.RdzvEvent(
        name="join",
        run_id="r1",
        message="joined",
        hostname="h",
        pid=7,
        node_state=torch_events.NodeState.RUNNING,
        rank=3,
        local_id=0,
    )
    agent = torch_events.Event(
        name="torchelastic.worker.status.SUCCEEDED",
        source=torch_events.EventSource.AGENT,
        metadata={
            "run_id": "r1",
            "global_rank": None,
            "state": "SUCCEEDED",
            "hostname": "h",
            "metadata": json.dumps({"group_world_size": 1}),
        },
    )
    monitor = json.dumps({"name": "epoch", "timestamp": 3.0, "data": {"n": 1}})
    with AsyncWriter(logdir) as writer:
        writer.add_timeline("agent", agent.serialize(), 2.0)
        writer.add_timeline("rendezvous", rdzv.serialize(), 1.0)
        writer.add_timeline("monitor", monitor, 3.0)
    frame = readers.read_events(logdir)
    assert list(frame.columns) == ["run", "wall_time", "kind", *contract.FIELDS]
    assert list(frame["kind"]) == ["rendezvous", "agent", "monitor"]
    first, second, third = frame.to_dict("records")
    assert (first["state"], first["rank"], first["pid"], first["message"]) == (
        "RUNNING",
        3,
        7,
        "joined",
    )
    assert (second["source"], second["state"], second["metadata"]["group_world_size"]) == (
        "AGENT",
        "SUCCEEDED",
        1,
    )
    assert (third["name"], third["metadata"]) == ("epoch", {"n": 1})


def test_iter_timeline_yields_the_payload_exactly(logdir):
    """The pandas-free iterator hands back torch's JSON text unchanged."""
    payload = '{"name": "x",   "timestamp": 1.5, "data": {"k": "v"}}'
    with AsyncWriter(logdir) as writer:
        writer.add_timeline("monitor", payload, 1.5)
    [record] = readers.iter_timeline(logdir)
    assert record == readers.TimelineRecord(".", 1.5, 0, "monitor", payload)


def test_a_record_with_a_malformed_field_is_skipped(logdir, caplog):
    """A record whose metadata or data is not a JSON object is skipped; the others are read."""
    with AsyncWriter(logdir) as writer:
        writer.add_timeline("worker", '{"name": "bad", "source": "WORKER", "metadata": 5}', 1.0)
        writer.add_timeline("monitor", '{"name": "bad", "data": [1]}', 2.0)
        writer.add_timeline("monitor", '{"name": "good", "data": {"n": 1}}', 3.0)
    rows = list(readers.decode_timeline(readers.iter_timeline(logdir)))
    assert [(row["name"], row["metadata"]) for row in rows] == [("good", {"n": 1})]
    assert caplog.text.count("unreadable") == 2


def test_timeline_rows_are_decode_timelines_and_count_the_same_damage(logdir):
    """``iter_timeline_rows`` gives ``decode_timeline``'s rows, in order, and leaves out and
    counts the same unreadable payloads, whatever version holds them."""
    with AsyncWriter(logdir / "columnar") as writer:  # one version-4 record
        writer.add_timeline("worker", '{"name": "bad", "source": "WORKER", "metadata": 5}', 1.0)
        for i in range(3):
            metadata = {"state": "RUNNING", "global_rank": i, "metadata": '{"k": [1]}'}
            worker = {"name": "w", "source": "WORKER", "metadata": metadata}
            writer.add_timeline("worker", json.dumps(worker), 2.0 + i)
    with AsyncWriter(logdir / "text") as writer:  # JSON json.dumps would not give back: version 3
        writer.add_timeline("monitor", '{"name": "m",  "data": {"n": 1}}', 1.5)
        writer.add_timeline("monitor", '{"name": "bad",  "data": [1]}', 2.5)
        writer.add_timeline("monitor", '{"name": "m",  "data": {"n": 1}}', 3.5)
    ours, theirs = readers.DamageReport(), readers.DamageReport()
    rows = list(readers.iter_timeline_rows(logdir, ours))
    assert rows == list(readers.decode_timeline(readers.iter_timeline(logdir, theirs), theirs))
    assert [(row["run"], row["name"]) for row in rows] == [
        *[("columnar", "w")] * 3,
        *[("text", "m")] * 2,
    ]
    assert list(ours) == list(theirs) and ours.counts() == {"bad_payload": 2}


def test_a_torn_tail_is_skipped(logdir):
    """A file cut inside its last record still yields every complete record."""
    with AsyncWriter(logdir) as writer:
        for i in range(10):
            writer.add_scalar("x", float(i))
        path = writer.path
    with open(path, "r+b") as file:
        file.truncate(file.seek(0, 2) - 3)
    assert [p.value for p in readers.iter_scalars(logdir)] == [float(i) for i in range(9)]


def test_scalar_tensors_from_torch_new_style_are_read(logdir, torch):
    """Scalars torch's SummaryWriter writes as tensors (new_style) are read like simple values."""
    import torch.utils.tensorboard as tensorboard

    writer = tensorboard.SummaryWriter(str(logdir))
    writer.add_scalar("a", 1.5, global_step=4, new_style=True)
    writer.add_scalar("a", 2.5, global_step=5, new_style=True)
    writer.close()
    assert [(p.step, p.value) for p in readers.iter_scalars(logdir)] == [(4, 1.5), (5, 2.5)]


def test_pandas_missing_names_the_extra(logdir, monkeypatch):
    """Without pandas, the DataFrame readers say which extra to install."""
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'tb-monitor\[pandas\]'"):
        readers.read_scalars(logdir)

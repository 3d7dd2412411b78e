"""Exports: Chrome/Perfetto trace, JSON lines of torch's events, scalars as CSV, and the CLI."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import tracemalloc
from collections import Counter

import pytest
from conftest import need
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tb_monitor import cli, contract, export
from tb_monitor.elastic.events.api import Event, EventSource, RdzvEvent
from tb_monitor.logdir import readers
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import generate_job


@pytest.fixture
def job(logdir):
    """A synthetic two-node job (2 workers each) with one failed attempt and a restart."""
    return generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)


def _trace(logdir) -> dict:
    return export.to_chrome_trace(logdir, progress=False)


def _metadata(trace: dict, name: str) -> dict:
    return {
        (event["pid"], event.get("tid")): event["args"]["name"]
        for event in trace["traceEvents"]
        if event["ph"] == "M" and event["name"] == name
    }


def test_chrome_trace_names_one_process_per_node_and_one_thread_per_lane(logdir, job):
    """process_name metadata names each node of the job, thread_name each lane on it."""
    trace = _trace(logdir)
    processes = _metadata(trace, "process_name")
    threads = _metadata(trace, "thread_name")
    by_name = {name: pid for (pid, _), name in processes.items()}
    assert {"job · node-000", "job · node-001"} <= set(by_name)
    node0 = {name for (pid, _), name in threads.items() if pid == by_name["job · node-000"]}
    assert node0 == {
        "rendezvous: node-000 (pid 4000)",
        "agent: agent-node-000-4000",
        "worker: rank 0",
        "worker: rank 1",
    }


def test_chrome_trace_draws_each_worker_attempt_as_a_complete_event(logdir, job):
    """A worker attempt is one "X" event from its START to its end, in microseconds; the failed
    one, the attempt's root cause, is named by its reason."""
    rows = list(readers.decode_timeline(readers.iter_timeline(logdir)))
    failed = next(r for r in rows if r["kind"] == contract.WORKER and r["state"] == "FAILED")
    start = next(
        r
        for r in rows
        if r["kind"] == contract.WORKER
        and r["state"] == "START"
        and r["rank"] == failed["rank"]
        and r["metadata"]["agent_restarts"] == 0
    )
    complete = [
        e
        for e in _trace(logdir)["traceEvents"]
        if e["ph"] == "X"
        and e["name"] == "attempt 0: OutOfMemoryError: CUDA out of memory (rank 2)"
    ]
    assert len(complete) == 1
    (event,) = complete
    assert event["ts"] == round(start["wall_time"] * 1e6)
    assert event["dur"] == round((failed["wall_time"] - start["wall_time"]) * 1e6)
    assert event["args"]["end"]["error_trace"] == failed["error_trace"]


def test_chrome_trace_names_the_collateral_ranks_stopped_by_restart(logdir, job):
    """The ranks that went down with the failed one read "stopped by restart", as on the tab."""
    names = {
        e["tid"]: e["name"]
        for e in _trace(logdir)["traceEvents"]
        if e["ph"] == "X" and e["name"].startswith("attempt 0:")
    }
    assert sorted(names.values()).count("attempt 0: stopped by restart") == 3


def test_chrome_trace_draws_rendezvous_rounds_and_points(logdir, job):
    """Each node's rendezvous rounds are complete events; other records are thread instants."""
    events = [e for e in _trace(logdir)["traceEvents"] if e["ph"] != "M"]
    rounds = Counter(e["name"] for e in events if e["ph"] == "X" and e["cat"] == "rendezvous")
    assert rounds == {"round 0": 2, "round 1": 2}
    instants = [e for e in events if e["ph"] == "i"]
    assert instants and all(e["s"] == "t" for e in instants)
    keep_alive = next(e for e in instants if e["name"].endswith("_keep_alive"))
    assert keep_alive["args"]["source"] == "RENDEZVOUS"
    assert keep_alive["args"]["hostname"].startswith("node-")


def test_chrome_trace_holds_every_record_once(logdir, job):
    """Every timeline record is an instant or one end of a complete event, exactly once."""
    events = [e for e in _trace(logdir)["traceEvents"] if e["ph"] != "M"]
    represented = sum(1 if e["ph"] == "i" else 1 + ("end" in e["args"]) for e in events)
    assert represented == job.total_events


def test_an_attempt_without_an_end_is_exported_open(logdir):
    """A worker START with no end yet becomes a complete event up to the last record, marked open."""
    start = Event(
        "torchelastic.worker.status.START",
        source=EventSource.WORKER,
        metadata={"run_id": "r", "global_rank": 0, "state": "START", "agent_restarts": 0},
    )
    note = Event(
        "torchelastic.worker.status.HEALTHY",
        source=EventSource.AGENT,
        metadata={"run_id": "r", "state": "HEALTHY", "hostname": "h"},
    )
    with AsyncWriter(logdir / "r" / "agent-h-1") as writer:
        writer.add_timeline(contract.WORKER, start.serialize(), wall_time=100.0)
        writer.add_timeline(contract.AGENT, note.serialize(), wall_time=103.5)
    (attempt,) = [e for e in _trace(logdir)["traceEvents"] if e["ph"] == "X"]
    assert attempt["dur"] == 3_500_000 and attempt["args"]["open"] is True


def test_jsonl_lines_hold_torchs_json_with_run_kind_and_time(logdir, job):
    """Each line's "event" deserializes with torch's own classes; lines are in time order."""
    torch_api = need("torch.distributed.elastic.events.api")
    out = io.StringIO()
    assert export.write_jsonl(logdir, out, progress=False) == job.total_events
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["wall_time"] for line in lines] == sorted(line["wall_time"] for line in lines)
    kinds = Counter(line["kind"] for line in lines)
    assert set(kinds) == {contract.RENDEZVOUS, contract.AGENT, contract.WORKER, contract.MONITOR}
    for line in lines:
        raw = json.dumps(line["event"])
        if line["kind"] == contract.RENDEZVOUS:
            assert torch_api.RdzvEvent.deserialize(raw).run_id == "job"
        elif line["kind"] in (contract.AGENT, contract.WORKER):
            assert torch_api.Event.deserialize(raw).source.value == line["kind"].upper()
        assert line["run"] in job.runs


def test_jsonl_events_round_trip_through_our_elastic_api(logdir, job):
    """Our torch-compatible RdzvEvent reads the rendezvous lines back field for field."""
    out = io.StringIO()
    export.write_jsonl(logdir, out, progress=False)
    first = json.loads(out.getvalue().splitlines()[0])
    assert first["kind"] == contract.RENDEZVOUS
    assert (
        json.loads(RdzvEvent.deserialize(json.dumps(first["event"])).serialize()) == first["event"]
    )


def test_csv_holds_every_scalar(logdir, tmp_path):
    """The CSV has the header run,tag,step,wall_time,value and one row per scalar point."""
    with AsyncWriter(logdir / "job" / "rank-0") as writer:
        for step in range(3):
            writer.add_scalar("loss.mean", 0.5**step, wall_time=50.0 + step)
    out = tmp_path / "scalars.csv"
    assert export.write_csv(logdir, out, progress=False) == 3
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["run", "tag", "step", "wall_time", "value"]
    assert rows[1:] == [
        ["job/rank-0", "loss.mean", str(step), str(50.0 + step), str(0.5**step)]
        for step in range(3)
    ]


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_cli_writes_each_format(logdir, job, tmp_path, fmt, capsys):
    """`tb-monitor export LOGDIR --format F -o FILE` writes the file and exits 0."""
    if fmt == "csv":
        with AsyncWriter(logdir / "job" / "rank-0") as writer:
            writer.add_scalar("loss.mean", 0.5, wall_time=1.0)
    out = tmp_path / f"out.{fmt}"
    assert cli.main(["export", str(logdir), "--format", fmt, "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    assert str(out) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}", "--format", "jsonl", "-o", "{out}"], "does not exist"),
        (["{empty}", "--format", "chrome-trace", "-o", "{out}"], "holds no timeline events"),
        (["{empty}", "--format", "csv", "-o", "{out}"], "holds no scalars"),
        (["{empty}", "--format", "svg", "-o", "{out}"], "invalid choice: 'svg'"),
        (["{empty}", "--format", "jsonl"], "required: -o/--output"),
    ],
)
def test_cli_bad_input_prints_one_line_and_exits_2(tmp_path, capsys, args, message):
    """Missing or empty logdir, unknown format, missing output: one clear line, exit code 2."""
    empty = tmp_path / "empty"
    empty.mkdir()
    paths = {"missing": tmp_path / "missing", "empty": empty, "out": tmp_path / "out"}
    argv = ["export", *(arg.format(**paths) for arg in args)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tb-monitor export: ") and message in err
    assert not (tmp_path / "out").exists()


def test_progress_bar_is_drawn_on_request(logdir, job, capsys):
    """With progress on, stderr shows the bar reaching the number of records."""
    export.write_jsonl(logdir, io.StringIO(), progress=True)
    err = capsys.readouterr().err
    assert f"jsonl [{'#' * 30}] {job.total_events}/{job.total_events}" in err


def test_progress_bar_stays_quiet_for_small_logdirs_off_a_terminal(logdir, job, capsys):
    """By default a small export to a non-terminal stderr prints no progress."""
    export.write_jsonl(logdir, io.StringIO())
    assert capsys.readouterr().err == ""


def test_jsonl_leaves_out_an_unreadable_record_and_keeps_the_rest(logdir, tmp_path):
    """A record that is not JSON is skipped (and logged); the records around it are exported."""
    good = Event("ok", EventSource.AGENT, timestamp=1).serialize()
    with AsyncWriter(str(logdir)) as writer:
        writer.add_timeline(contract.AGENT, good, wall_time=1.0)
        writer.add_timeline(contract.AGENT, "not json{", wall_time=2.0)
        writer.add_timeline(contract.AGENT, good, wall_time=3.0)
    out = tmp_path / "events.jsonl"
    assert cli.main(["export", str(logdir), "--format", "jsonl", "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["wall_time"] for line in lines] == [1.0, 3.0]


# ---------------------------------------------------------------------------------------------
# Bounded memory on big logdirs: jsonl sorted in chunks on disk, csv streamed
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    """24 runs of a job, plus a run whose events share their times with the job's and each
    other's (and one unreadable record): the logdir and its event count."""
    root = tmp_path_factory.mktemp("tied") / "logs"
    job = generate_job(root, nodes=8, workers_per_node=2, restarts=2, events=1_500)
    times = sorted({record.wall_time for record in readers.iter_timeline(root)})[::50]
    with AsyncWriter(root / "job" / "tïed") as writer:  # a run name json.dumps escapes
        for i, wall_time in enumerate(times):
            event = Event(f"tie-{i}", EventSource.AGENT, timestamp=i).serialize()
            writer.add_timeline(contract.AGENT, event, wall_time=wall_time)
            writer.add_timeline(contract.WORKER, event, wall_time=wall_time)
        writer.add_timeline(contract.AGENT, "not json{", wall_time=times[3])
    return root, job.total_events + 2 * len(times)


def _jsonl(logdir, **kwargs) -> str:
    out = io.StringIO()
    export.write_jsonl(logdir, out, progress=False, **kwargs)
    return out.getvalue()


def _jsonl_held_in_memory(logdir) -> str:
    """The export as it was before chunks: every record held, one stable sort by time."""
    lines = []
    for record in sorted(readers.iter_timeline(logdir), key=lambda record: record.wall_time):
        try:
            event = json.loads(record.payload)
        except ValueError:
            continue
        line = {"run": record.run, "kind": record.kind, "wall_time": record.wall_time}
        line["event"] = event
        lines.append(json.dumps(line, separators=(",", ":")) + "\n")
    return "".join(lines)


def test_jsonl_is_the_stable_time_sort_of_every_readable_record(tied, caplog):
    """The lines are json.dumps of each record, by time, equal times in read order, bad ones out."""
    logdir, events = tied
    times = Counter(record.wall_time for record in readers.iter_timeline(logdir))
    assert max(times.values()) >= 3  # ties across runs and kinds
    text = _jsonl(logdir)
    assert text == _jsonl_held_in_memory(logdir)
    assert text.count("\n") == events
    assert "unreadable agent record left out" in caplog.text


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_lines=st.integers(min_value=1, max_value=2_000))
@example(chunk_lines=1)  # every line its own file: several rounds of merges
@example(chunk_lines=1_555)  # one line too many for one chunk
def test_jsonl_in_small_chunks_writes_the_same_text_as_in_one(tied, chunk_lines):
    """However small the chunks (spilled to disk and merged), the text is that of one sort."""
    logdir, events = tied
    assert events == 1_556
    assert _jsonl(logdir, chunk_lines=chunk_lines) == _jsonl(logdir, chunk_lines=10**9)


class _Watching(io.TextIOBase):
    """An output stream that notes what the temporary root holds at its first write and can
    fail at a given line, as a full disk would."""

    def __init__(self, root, fail_at: int | None = None) -> None:
        self.root, self.fail_at = root, fail_at
        self.lines = 0
        self.seen: list[str] | None = None

    def write(self, text: str) -> int:
        if self.seen is None:
            self.seen = os.listdir(self.root)
        self.lines += 1
        if self.lines == self.fail_at:
            raise OSError(28, "No space left on device")
        return len(text)


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    """tempfile's directory, empty, for this test alone."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_jsonl_removes_its_temporary_files_when_done(tied, temp_root):
    """Chunks spilled while writing are in a temporary directory that is gone afterwards."""
    logdir, events = tied
    out = _Watching(temp_root)
    assert export.write_jsonl(logdir, out, progress=False, chunk_lines=100) == events
    assert out.lines == events
    assert len(out.seen) == 1 and out.seen[0].startswith("tb-monitor-export-")
    assert os.listdir(temp_root) == []


def test_jsonl_removes_its_temporary_files_when_writing_fails(tied, temp_root):
    """An output that fails midway raises, and the spilled chunks are removed all the same."""
    logdir, _ = tied
    out = _Watching(temp_root, fail_at=500)
    with pytest.raises(OSError, match="No space left"):
        export.write_jsonl(logdir, out, progress=False, chunk_lines=100)
    assert out.lines == 500 and out.seen
    assert os.listdir(temp_root) == []


def test_jsonl_spills_nothing_when_every_line_fits_in_one_chunk(tied, temp_root):
    """With ``chunk_lines`` at the number of lines, nothing is written to the temporary root."""
    logdir, events = tied
    out = _Watching(temp_root)
    assert export.write_jsonl(logdir, out, progress=False, chunk_lines=events) == events
    assert out.seen == []


def test_jsonl_rejects_chunks_of_no_lines(tied):
    """``chunk_lines`` below 1 is a ValueError naming it."""
    with pytest.raises(ValueError, match="chunk_lines"):
        export.write_jsonl(tied[0], io.StringIO(), chunk_lines=0)


def _peak(write, *args, **kwargs) -> int:
    """The peak of Python's traced allocations while ``write`` runs, in bytes."""
    tracemalloc.start()
    try:
        write(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_jsonl_memory_is_bounded_by_chunk_lines(tmp_path):
    """Writing 10k events in chunks of 250 lines peaks at under a third of holding them all."""
    logdir = tmp_path / "logs"
    generate_job(logdir, nodes=16, workers_per_node=2, events=10_000)
    out = tmp_path / "events.jsonl"
    whole = _peak(export.write_jsonl, logdir, out, progress=False, chunk_lines=10**9)
    expected = out.read_bytes()
    chunked = _peak(export.write_jsonl, logdir, out, progress=False, chunk_lines=250)
    assert out.read_bytes() == expected
    assert chunked < whole / 3, (chunked, whole)


def _scalar_runs(logdir, runs: int) -> int:
    """``runs`` runs of 100 steps of 20 scalars each; the number of scalars."""
    for run in range(runs):
        with AsyncWriter(logdir / "job" / f"rank-{run}") as writer:
            for step in range(100):
                scalars = {f"loss/{tag}": step + tag / 20 for tag in range(20)}
                writer.add_scalars(scalars, wall_time=1_000.0 + step)
    return runs * 100 * 20


def test_csv_memory_does_not_grow_with_the_rows(tmp_path):
    """Writing 8 times the scalars peaks no higher, and below holding the smaller logdir's rows."""
    small, big = tmp_path / "small", tmp_path / "big"
    rows = {small: _scalar_runs(small, 1), big: _scalar_runs(big, 8)}
    peaks = {}
    for logdir in (small, big):
        out = tmp_path / f"{logdir.name}.csv"
        peaks[logdir] = _peak(export.write_csv, logdir, out, progress=False)
        with open(out, newline="") as f:
            assert sum(1 for _ in csv.reader(f)) == rows[logdir] + 1
    held = _peak(list, readers.iter_scalars(small))  # the small logdir's rows, all held
    assert peaks[big] < 1.5 * peaks[small], peaks
    assert peaks[big] < held, (peaks[big], held)


def test_csv_rows_are_the_scalars_in_read_order(tmp_path):
    """Each row is one scalar as ``readers.iter_scalars`` yields it, runs and steps in order."""
    logdir = tmp_path / "logs"
    _scalar_runs(logdir, 3)
    out = io.StringIO()
    assert export.write_csv(logdir, out, progress=False) == 6_000
    expected = io.StringIO()
    csv.writer(expected).writerows([readers.SCALAR_COLUMNS, *readers.iter_scalars(logdir)])
    assert out.getvalue() == expected.getvalue()


def test_csv_progress_counts_rows_without_a_total(logdir, capsys):
    """With progress on, stderr shows the rows written so far (their number is not known ahead)."""
    _scalar_runs(logdir, 1)
    export.write_csv(logdir, io.StringIO(), progress=True)
    assert "csv: 2000\n" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fmt", "where", "message"),
    [
        ("jsonl", "missing", "does not exist"),
        ("jsonl", "empty", "holds no timeline events"),
        ("csv", "missing", "does not exist"),
        ("csv", "empty", "holds no scalars"),
        ("csv", "job", "holds no scalars"),  # timeline events only: read to the end first
    ],
)
def test_nothing_to_export_raises_naming_the_logdir_and_leaves_no_file(
    tmp_path, fmt, where, message
):
    """A missing logdir or one without rows is a ValueError naming it; no output file is made."""
    path = tmp_path / where
    if where != "missing":
        path.mkdir()
    if where == "job":
        generate_job(path, nodes=1, workers_per_node=1)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message) as raised:
        export.WRITERS[fmt](path, out, progress=False)
    assert repr(str(path)) in str(raised.value)
    assert not out.exists()

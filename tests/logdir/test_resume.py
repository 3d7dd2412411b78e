"""Where a restarted writer continues: steps files read first, event files only where they fall
short, and never on the caller's thread."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing import event_accumulator, io_wrapper
from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_monitor.logdir import fs, readers, resume, tfrecord
from tb_monitor.sinks import encoding
from tb_monitor.sinks.writer import AsyncWriter

HEADER = len(encoding.version_record(0.0))


def _write(run_dir, tag: str, count: int) -> None:
    with AsyncWriter(run_dir) as writer:
        for i in range(count):
            writer.add_scalar(tag, float(i))


def _steps(run_dir, tag: str) -> list[int]:
    return [p.step for p in readers.iter_scalars(run_dir) if p.tag == tag]


def _spy(monkeypatch, module, name: str) -> list[tuple]:
    """Record the arguments of every call of ``module.<name>``."""
    calls: list[tuple] = []
    real = getattr(module, name)

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return calls


def _scalar_record(tag: str, step: int) -> bytes:
    value = summary_pb2.Summary.Value(tag=tag, simple_value=1.0)
    event = event_pb2.Event(wall_time=1.0, step=step, summary=summary_pb2.Summary(value=[value]))
    return tfrecord.frame(event.SerializeToString())


def test_a_restart_reads_the_steps_file_and_no_event_file(logdir, monkeypatch):
    """With a steps file covering the run, no event file is read back."""
    _write(logdir, "x", 5)
    tails = _spy(monkeypatch, resume, "_read_tail")
    assert resume.resolve(str(logdir), HEADER).steps == {"x": 5}
    assert tails == []


def test_steps_continue_from_the_steps_file(logdir):
    """A new writer continues each tag one above the steps file's record of it."""
    _write(logdir, "x", 3)
    _write(logdir, "x", 2)
    assert _steps(logdir, "x") == [0, 1, 2, 3, 4]


def test_records_after_a_stale_steps_file_are_read_from_its_offset(logdir, monkeypatch):
    """Records written after the steps file's last update are read, and only those."""
    _write(logdir, "x", 3)
    [path] = fs.event_files(str(logdir))
    covered = os.path.getsize(path)
    with open(path, "ab") as file:  # a writer killed before its steps file caught up
        file.write(_scalar_record("x", 41))
    reads = _spy(monkeypatch, fs, "read_bytes")
    _write(logdir, "x", 1)
    assert _steps(logdir, "x") == [0, 1, 2, 41, 42]
    assert (path, covered) in reads


def test_a_run_without_steps_files_is_read_whole(logdir):
    """An old logdir (no steps files) is read back as before."""
    _write(logdir, "x", 3)
    for name in os.listdir(logdir):
        if resume.STEPS_MARK in name:
            os.remove(logdir / name)
    _write(logdir, "x", 1)
    assert _steps(logdir, "x") == [0, 1, 2, 3]


def test_a_steps_file_claiming_a_torn_offset_falls_back_to_the_whole_file(logdir):
    """A steps file whose offset is no record's start costs a full read, not repeated steps."""
    _write(logdir, "x", 3)
    [path] = fs.event_files(str(logdir))
    name = os.path.basename(path)
    state = {"version": 1, "steps": {}, "covers": {name: HEADER + 7}}
    (logdir / resume.steps_name(name)).write_text(json.dumps(state))
    assert resume.resolve(str(logdir), HEADER).steps == {"x": 3}


def test_a_writer_that_started_beside_another_does_not_hide_its_later_steps(logdir):
    """Two writers in one run: what the first wrote after the second started still counts."""
    first = AsyncWriter(logdir)
    first.add_scalar("x", 0.0)
    first.flush()
    second = AsyncWriter(logdir)
    second.add_scalar("y", 0.0)
    second.flush()  # its steps file covers the first's file up to here
    for i in range(5):
        first.add_scalar("x", float(i))
    first.close()
    second.close()
    _write(logdir, "x", 1)
    assert _steps(logdir, "x") == [0, 1, 2, 3, 4, 5, 6]


def test_the_caller_never_waits_for_the_run_to_be_read(logdir, monkeypatch):
    """Construction and adds return while the run is still being read; steps are right after."""
    _write(logdir, "x", 2)
    release = threading.Event()
    real = resume.resolve

    def slow_resolve(*args):
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(resume, "resolve", slow_resolve)
    started = time.perf_counter()
    writer = AsyncWriter(logdir)
    writer.add_scalar("x", 2.0)
    waited = time.perf_counter() - started
    release.set()
    writer.close()
    assert waited < 0.5
    assert _steps(logdir, "x") == [0, 1, 2]


def test_steps_files_are_invisible_to_tensorboard_and_our_readers(logdir):
    """TensorBoard, fs.event_files and the damage report never see a steps file."""
    _write(logdir, "x", 2)
    [steps_file] = [n for n in os.listdir(logdir) if resume.STEPS_MARK in n]
    assert not io_wrapper.IsTensorFlowEventsFile(str(logdir / steps_file))
    assert all(resume.STEPS_MARK not in path for path in fs.event_files(str(logdir)))
    accumulator = event_accumulator.EventAccumulator(str(logdir))
    accumulator.Reload()
    assert [e.step for e in accumulator.Scalars("x")] == [0, 1]
    assert not readers.damage(logdir)


@pytest.mark.parametrize("bucket", ["s3_bucket", "gcs_bucket"])
def test_a_restart_on_an_object_store_reads_one_steps_file(bucket, request, monkeypatch):
    """On s3:// and gs:// a restart reads the steps file alone, and continues the steps."""
    run = f"{request.getfixturevalue(bucket)}/rank-0"
    _write(run, "x", 2)
    reads = _spy(monkeypatch, fs, "read_bytes")
    _write(run, "x", 1)
    [(path, start)] = reads
    assert resume.STEPS_MARK in path and start == 0
    assert _steps(run, "x") == [0, 1, 2]


def test_a_stale_steps_file_of_an_object_stream_reads_only_the_objects_after_it(
    logdir, monkeypatch
):
    """A stream's offsets span its segment and deltas: the tail is read from inside the delta."""
    header = encoding.version_record(0.0)
    records = [_scalar_record("x", step) for step in range(6)]
    base = "events.out.tfevents.1.host.0000001.000000.tbm"
    delta = f"{base.replace('tfevents', 'tbmdelta')}.s000001.d0000"
    (logdir / f"{base}.s000000").write_bytes(header + b"".join(records[:3]))
    (logdir / delta).write_bytes(header + b"".join(records[3:]))
    covered = HEADER + sum(map(len, records[:4]))
    state = {"version": 1, "steps": {"x": 4}, "covers": {base: covered}}
    (logdir / resume.steps_name(base)).write_text(json.dumps(state))
    reads = _spy(monkeypatch, fs, "read_bytes")
    resumed = resume.resolve(str(logdir), HEADER)
    assert resumed.steps == {"x": 6}
    assert resumed.covers == {base: HEADER + sum(map(len, records))}
    assert reads[1:] == [(str(logdir / delta), HEADER + len(records[3]))]


def test_a_damaged_record_costs_a_tolerant_read_not_a_restart_from_zero(logdir):
    """A run with a corrupt record still gives each tag's next step (the damage is skipped)."""
    _write(logdir, "x", 5)
    [path] = fs.event_files(str(logdir))
    data = bytearray(Path(path).read_bytes())
    data[HEADER + 20] ^= 0xFF  # inside the first scalar record: its data checksum fails
    Path(path).write_bytes(bytes(data))
    os.remove(logdir / resume.steps_name(os.path.basename(path)))
    assert resume.resolve(str(logdir), HEADER).steps == {"x": 5}


@pytest.mark.parametrize("where", ["logdir", "s3_bucket"])
def test_a_restart_with_a_filename_suffix_continues_from_its_steps_file(
    where, request, monkeypatch
):
    """Event files named with torch's ``filename_suffix`` keep their steps file: a restart reads
    it alone and continues the steps, locally and on an object store (segments after the suffix)."""
    run = f"{request.getfixturevalue(where)}/rank-0"

    def write(count: int) -> None:
        with AsyncWriter(run, filename_suffix=".v2") as writer:
            for i in range(count):
                writer.add_scalar("x", float(i))

    write(2)
    reads = _spy(monkeypatch, fs, "read_bytes")
    write(1)
    [(path, start)] = reads
    assert resume.STEPS_MARK in path and path.endswith(".tbm.v2") and start == 0
    assert _steps(run, "x") == [0, 1, 2]

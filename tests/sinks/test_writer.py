"""The async writer: exact records, steps, unique files, bounded memory, errors, fork and exit."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import need
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_monitor import contract
from tb_monitor.logdir import fs, readers, tfrecord
from tb_monitor.sinks import encoding
from tb_monitor.sinks.writer import DROPPED_TAG, AsyncWriter


def _scalars(path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for point in readers.iter_scalars(path):
        out.setdefault(point.tag, []).append((point.step, point.value))
    return out


def _accumulator(run_dir):
    acc = event_accumulator.EventAccumulator(
        str(run_dir), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    return acc


def _run_script(source: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_scalars_read_back_through_tensorboard(logdir):
    """Scalars land with their values, wall times and per-tag steps in TensorBoard's loader."""
    with AsyncWriter(logdir) as writer:
        for i in range(3):
            writer.add_scalar("loss", i / 4, wall_time=100.0 + i)
        writer.add_scalar("lr", 0.5, wall_time=200.0)
    acc = _accumulator(logdir)
    assert [(e.step, e.wall_time, e.value) for e in acc.Scalars("loss")] == [
        (0, 100.0, 0.0),
        (1, 101.0, 0.25),
        (2, 102.0, 0.5),
    ]
    assert [(e.step, e.value) for e in acc.Scalars("lr")] == [(0, 0.5)]


def test_hand_encoded_scalar_equals_protobuf_encoding(logdir):
    """A hand-encoded scalar event is byte-for-byte what protobuf serializes."""
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("a/ü" * 50, -1.5, wall_time=1234.5, step=300)
        writer.add_scalar("neg", 2.0, wall_time=1.0, step=-7)
        path = writer.path
    data = list(tfrecord.iter_records(path))[1:]  # after the file_version record
    for raw, (tag, value, wall_time, step) in zip(
        data, [("a/ü" * 50, -1.5, 1234.5, 300), ("neg", 2.0, 1.0, -7)], strict=True
    ):
        expected = event_pb2.Event(
            wall_time=wall_time,
            step=step,
            summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
            ),
        )
        assert raw == expected.SerializeToString()


def test_add_scalars_writes_one_point_per_tag(logdir):
    """A whole mapping (a Stat window) becomes one scalar per key at the same wall time."""
    with AsyncWriter(logdir) as writer:
        writer.add_scalars({"x.sum": 10, "x.count": 5.0}, wall_time=7.0)
        writer.add_scalars({"x.sum": 20, "x.count": 6.0}, wall_time=8.0)
    assert _scalars(logdir) == {"x.sum": [(0, 10.0), (1, 20.0)], "x.count": [(0, 5.0), (1, 6.0)]}


def test_steps_continue_after_a_restart(logdir):
    """A new writer on the same run continues each tag one above the largest step it holds."""
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("loss", 1.0)
        writer.add_scalar("loss", 2.0, step=41)
        writer.add_text("note", "hi")
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("loss", 3.0)
        writer.add_scalar("fresh", 4.0)
        writer.add_text("note", "again")
    assert _scalars(logdir) == {"loss": [(0, 1.0), (41, 2.0), (42, 3.0)], "fresh": [(0, 4.0)]}
    assert [e.step for e in _accumulator(logdir).Tensors("note")] == [0, 1]


def test_text_and_timeline_records_carry_their_plugin_metadata(logdir):
    """Text and timeline records are tensors TensorBoard files under their plugins."""
    payload = '{"name": "x", "timestamp": 5.0, "data": {}}'
    with AsyncWriter(logdir) as writer:
        writer.add_text("event", "| a | b |", wall_time=3.0)
        writer.add_timeline("monitor", payload, 5.0)
    acc = _accumulator(logdir)
    assert acc.SummaryMetadata("event").plugin_data.plugin_name == "text"
    timeline = acc.SummaryMetadata("timeline/monitor")
    assert timeline.plugin_data.plugin_name == "tb_monitor_timeline"
    assert timeline.data_class == summary_pb2.DATA_CLASS_TENSOR
    [record] = acc.Tensors("timeline/monitor")
    tensor = record.tensor_proto
    assert record.wall_time == 5.0
    assert contract.record_events(tensor.string_val, record.wall_time, True) == [(5.0, payload)]


def test_files_sort_in_creation_order(logdir):
    """Event file names sort as they were created, even past ten writers in one second."""
    paths = []
    for _ in range(12):
        with AsyncWriter(logdir) as writer:
            paths.append(writer.path)
    assert fs.event_files(str(logdir)) == sorted(paths) == paths


def test_two_writers_in_one_second_never_share_a_file(logdir):
    """Writers opened together in one directory each get their own file and lose nothing."""
    writers = [AsyncWriter(logdir) for _ in range(3)]
    assert len({w.path for w in writers}) == 3
    for i, writer in enumerate(writers):
        writer.add_scalar(f"w{i}", float(i))
    for writer in writers:
        writer.close()
    assert _scalars(logdir) == {"w0": [(0, 0.0)], "w1": [(0, 1.0)], "w2": [(0, 2.0)]}


def test_unwritable_logdir_fails_at_construction_naming_it(tmp_path):
    """A logdir that cannot be created raises an OSError whose message names it."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match=str(blocker / "run")):
        AsyncWriter(blocker / "run")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w: w.add_scalar("t", "abc"), "scalar 't' must be a real number, got 'abc'"),
        (lambda w: w.add_scalar(3, 1.0), "tag must be a str, got 3"),
        (lambda w: w.add_scalar("t", 1.0, step=1.5), "step must be an integer, got 1.5"),
        (lambda w: w.add_scalars({"a": [1]}), r"scalar 'a' must be a real number, got \[1\]"),
        (lambda w: w.add_text("t", 5), "text for tag 't' must be a str, got 5"),
        (lambda w: w.add_timeline("nope", "{}", 1.0), "unknown timeline kind 'nope'"),
    ],
)
def test_bad_arguments_are_rejected_by_name(logdir, call, message):
    """Bad input raises a TypeError/ValueError naming it, and what was accepted is kept."""
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("kept", 1.0)
        with pytest.raises((TypeError, ValueError), match=message):
            call(writer)
    assert _scalars(logdir) == {"kept": [(0, 1.0)]}


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "2"])
def test_bad_flush_secs_is_rejected(logdir, bad):
    """flush_secs must be a positive number."""
    with pytest.raises(ValueError, match="flush_secs"):
        AsyncWriter(logdir, flush_secs=bad)


def test_closed_writer_rejects_records_by_name(logdir):
    """Adding to a closed writer raises a ValueError naming its run directory."""
    writer = AsyncWriter(logdir)
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError, match=f"AsyncWriter for {logdir} is closed"):
        writer.add_scalar("x", 1.0)


def test_drop_policy_counts_and_records_drops(logdir):
    """With when_full='drop', records beyond the queue are counted and the count is written."""
    writer = AsyncWriter(logdir, max_queue=10, when_full="drop")
    with writer._drain_lock:  # hold the writer thread off so the queue fills
        for i in range(13):
            writer.add_scalar("x", float(i))
    writer.close()
    assert writer.dropped == 3
    points = _scalars(logdir)
    assert [v for _, v in points["x"]] == [float(i) for i in range(10)]
    assert points[DROPPED_TAG] == [(0, 3.0)]


def test_block_policy_waits_for_room_and_loses_nothing(logdir):
    """With the default policy a producer waits while the queue is full, then everything lands."""
    writer = AsyncWriter(logdir, max_queue=10)
    producer = threading.Thread(
        target=lambda: [writer.add_scalar("x", float(i)) for i in range(50)]
    )
    with writer._drain_lock:
        producer.start()
        producer.join(0.5)
        assert producer.is_alive()  # blocked on the full queue
    producer.join(30)
    assert not producer.is_alive()
    writer.close()
    assert writer.dropped == 0
    assert [v for _, v in _scalars(logdir)["x"]] == [float(i) for i in range(50)]


def test_forked_child_writes_its_own_file_without_parent_records(logdir):
    """After fork the child gets a live writer and a file of its own; nothing is duplicated."""
    writer = AsyncWriter(logdir)
    with writer._drain_lock:
        writer.add_scalar("before_fork", 1.0)  # still queued in the parent at fork time
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                writer.add_scalar("child", 2.0)
                writer.close()
                code = 0
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    writer.add_scalar("parent", 3.0)
    writer.close()
    assert _scalars(logdir) == {
        "before_fork": [(0, 1.0)],
        "child": [(0, 2.0)],
        "parent": [(0, 3.0)],
    }
    assert len(fs.event_files(str(logdir))) == 2


EXIT_SCRIPT = """
    import sys, time
    from tb_monitor.sinks.writer import AsyncWriter
    writer = AsyncWriter(sys.argv[1], flush_secs=60)  # no periodic flush can help
    for i in range(1000):
        writer.add_scalar("x", float(i))
    mode = sys.argv[2]
    if mode == "raise":
        raise RuntimeError("training failed")
    if mode == "sigterm":
        print("ready", flush=True)
        time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["return", "raise"])
def test_records_survive_exit_without_close(logdir, mode):
    """A process that ends (normally or by an uncaught exception) without close() keeps everything."""
    result = _run_script(EXIT_SCRIPT, str(logdir), mode)
    assert result.returncode == (0 if mode == "return" else 1), result.stderr
    assert "Traceback" not in result.stderr or mode == "raise"
    assert len(_scalars(logdir)["x"]) == 1000


def test_records_survive_sigterm_and_the_default_action_follows(logdir):
    """SIGTERM flushes every record, then the process dies by SIGTERM as before."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), str(logdir), "sigterm"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == -signal.SIGTERM
    assert len(_scalars(logdir)["x"]) == 1000


def test_sigkill_after_a_flush_interval_loses_nothing_older(logdir):
    """Records older than one flush interval are on disk without flush(): SIGKILL keeps them."""
    script = """
        import sys, time
        from tb_monitor.sinks.writer import AsyncWriter
        writer = AsyncWriter(sys.argv[1], flush_secs=0.2)
        for i in range(1000):
            writer.add_scalar("x", float(i))
        print("ready", flush=True)
        time.sleep(60)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(logdir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while len(list(readers.iter_scalars(logdir))) < 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(30)
    assert [v for _, v in _scalars(logdir)["x"]] == [float(i) for i in range(1000)]


def test_many_processes_into_one_directory_lose_nothing(logdir):
    """Four processes started together in one directory keep every record in their own files."""
    script = """
        import sys
        from tb_monitor.sinks.writer import AsyncWriter
        with AsyncWriter(sys.argv[1]) as writer:
            for i in range(2000):
                writer.add_scalar(f"proc{sys.argv[2]}", float(i))
                writer.add_scalar("shared", float(i))
    """
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(logdir), str(n)])
        for n in range(4)
    ]
    assert [p.wait(120) for p in procs] == [0, 0, 0, 0]
    assert len(fs.event_files(str(logdir))) == 4
    points = _scalars(logdir)
    for n in range(4):
        assert [v for _, v in points[f"proc{n}"]] == [float(i) for i in range(2000)]
    assert len(points["shared"]) == 8000


def _write_mixed_records(run_dir) -> bytes:
    """Write scalars of every shape the encoders distinguish; return the records after the header."""
    with AsyncWriter(run_dir) as writer:
        with writer._drain_lock:  # one batch: the C encoder sees runs and hands back the rest
            for i in range(300):
                writer.add_scalar("loss", i / 7, wall_time=1000.0 + i)
                writer.add_scalar("ü/" + "long" * 40, i, wall_time=1000.5)  # a 2-byte length
            for value in (10**300, 2**80, 1e39, -1e39, float("nan"), float("inf"), -0.0, True):
                writer.add_scalar("edge", value, wall_time=2.0)
            for step in (-7, 0, 127, 128, 2**14, 2**21, 2**40, 2**63 - 2, 2**70):
                writer.add_scalar("steps", 1.0, wall_time=3.0, step=step)
            writer.add_scalar("steps", 2.0, wall_time=3.0)  # one above 2**70
            writer.add_scalar("time", 1.0, wall_time=5)  # an int wall time
            writer.add_text("note", "between scalars", wall_time=4.0)
            writer.add_scalars({"x.sum": 10, "x.count": 5.0}, wall_time=6.0)
            writer.add_scalar("loss", 9.0, wall_time=7.0)
        path = writer.path
    return b"".join(tfrecord.frame(r) for r in list(tfrecord.iter_records(path))[1:])


def test_c_and_python_scalar_encoders_write_identical_bytes(tmp_path, monkeypatch):
    """The C scalar encoder and the pure-Python one write byte-identical event files."""
    c_encoder = need("tb_monitor.sinks._encoding")  # skips locally without it, fails in CI
    monkeypatch.setattr(encoding, "encode_scalars", c_encoder.encode_scalars)
    with_c = _write_mixed_records(tmp_path / "c")
    monkeypatch.setattr(encoding, "encode_scalars", None)
    pure_python = _write_mixed_records(tmp_path / "python")
    assert with_c == pure_python
    assert len(list(readers.iter_scalars(tmp_path / "c"))) == 600 + 8 + 10 + 1 + 2 + 1


def test_values_beyond_float32_are_written_as_infinities(logdir):
    """A value too large for float32, a huge int that fits a float included, lands as a signed
    infinity; an int beyond a float's range is refused naming the tag."""
    with AsyncWriter(logdir) as writer:
        for value in (1e39, -1e39, 10**300, -(10**300)):
            writer.add_scalar("big", value)
        with pytest.raises(OverflowError, match="'big'"):
            writer.add_scalar("big", 10**400)
    inf = float("inf")
    assert [v for _, v in _scalars(logdir)["big"]] == [inf, -inf, inf, -inf]


def test_a_built_event_is_made_on_the_writers_thread_and_written_whole(logdir):
    """``add_built``: the Event its callable returns lands as is, built off the caller's thread."""
    built_on: list[str] = []

    def build() -> event_pb2.Event:
        built_on.append(threading.current_thread().name)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="x", simple_value=2.5)])
        return event_pb2.Event(step=7, summary=summary)

    with AsyncWriter(logdir) as writer:
        writer.add_built(build, wall_time=123.0)
    events = [e for e in readers.iter_run_events(logdir) if e.HasField("summary")]
    assert [(e.wall_time, e.step, e.summary.value[0].simple_value) for e in events] == [
        (123.0, 7, 2.5)
    ]
    assert built_on and built_on[0] != threading.current_thread().name


def test_a_build_that_raises_is_counted_as_dropped_and_never_raised(logdir, caplog):
    """A failing build is a logged, counted drop; the records around it are written."""

    def build() -> event_pb2.Event:
        raise RuntimeError("no summary today")

    with AsyncWriter(logdir) as writer:
        writer.add_scalar("before", 1.0)
        writer.add_built(build)
        writer.add_scalar("after", 2.0)
        writer.flush()
        assert writer.dropped == 1
    tags = {v.tag for e in readers.iter_run_events(logdir) for v in e.summary.value}
    assert {"before", "after"} <= tags
    assert "no summary today" in caplog.text


def test_records_the_caller_dropped_are_written_as_dropped_records(logdir):
    """``count_dropped`` adds the caller's own drops to ``dropped`` and to dropped_records."""
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("x", 1.0)
        writer.count_dropped(2)
        writer.count_dropped(3)
        assert writer.dropped == 5
    assert _scalars(logdir)[DROPPED_TAG] == [(0, 5.0)]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_count_dropped_rejects_what_is_not_a_count(logdir, bad):
    """A negative or non-int count is a ValueError naming it."""
    with AsyncWriter(logdir) as writer, pytest.raises(ValueError, match=re.escape(repr(bad))):
        writer.count_dropped(bad)


def test_a_filename_suffix_ends_the_file_name_and_tensorboard_reads_it(logdir):
    """``filename_suffix`` goes last in the event file's name, and TensorBoard loads the file."""
    with AsyncWriter(logdir, filename_suffix=".rank0") as writer:
        writer.add_scalar("loss", 0.5)
        path = writer.path
    assert path.endswith(".tbm.rank0")
    assert [(e.step, e.value) for e in _accumulator(logdir).Scalars("loss")] == [(0, 0.5)]


@pytest.mark.parametrize("bad", ["a/b", "x\0", 3])
def test_a_filename_suffix_that_is_no_plain_name_is_rejected(logdir, bad):
    """A suffix with '/' or NUL (or not a str) is a ValueError naming it; no file is made."""
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        AsyncWriter(logdir, filename_suffix=bad)
    assert fs.event_files(str(logdir)) == []

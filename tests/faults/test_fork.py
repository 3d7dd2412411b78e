"""fork() after init: the child writes its own records to its own file, never a copy of the
parent's state (Stat windows, queued records), on a local disk and on an object store."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
from tensorboard.compat.proto import event_pb2

import tb_monitor
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.logdir import fs, readers, tfrecord

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

WINDOW = timedelta(milliseconds=150)


def _in_child(work) -> int:
    """Fork; the child runs ``work()`` and leaves by os._exit (1 if it raised); the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _next_torch_window() -> None:
    """Sleep into the next window of torch's Stat (aligned to the monotonic clock)."""
    size = WINDOW.total_seconds()
    time.sleep(size - time.monotonic() % size + 0.01)


def _values_by_file(run_dir: str, tag: str) -> dict[str, list[float]]:
    """``tag``'s values in each event file of the run, by file name."""
    out: dict[str, list[float]] = {}
    for path in fs.event_files(run_dir):
        for data in tfrecord.iter_records(path):
            for value in event_pb2.Event.FromString(data).summary.value:
                if value.tag == tag:
                    out.setdefault(os.path.basename(path), []).append(value.simple_value)
    return out


def test_a_torch_stat_window_from_before_a_fork_is_written_once(logdir, torch):
    """A torch.monitor.Stat's pre-fork window is written by the parent only; the child's own
    samples land in the child's own file."""
    monitor = tb_monitor.init(str(logdir), torch=True, rank_health=False)
    stat = torch.monitor.Stat("load", [torch.monitor.Aggregation.SUM], WINDOW)
    stat.add(100.0)

    def child() -> None:
        _next_torch_window()
        stat.add(1.0)  # ends the window it inherited: the copy of the parent's 100
        _next_torch_window()
        stat.add(2.0)  # ends the child's own window: 1
        monitor.close()

    pid = _in_child(child)
    _next_torch_window()
    stat.add(5.0)  # ends the parent's window: 100
    assert _exit_code(pid) == 0
    monitor.close()
    by_file = _values_by_file(str(logdir), "load.sum")
    parent_file, child_file = sorted(by_file, key=lambda name: 100.0 not in by_file[name])
    assert by_file == {parent_file: [100.0], child_file: [1.0]}


def test_a_tb_monitor_stat_window_from_before_a_fork_is_written_once(logdir):
    """A tb_monitor.Stat's pre-fork samples are the parent's only; the child logs its own."""
    monitor = tb_monitor.init(str(logdir))
    stat = tb_monitor.Stat("load", [tb_monitor.Aggregation.SUM], timedelta(hours=1))
    stat.add(100.0)

    def child() -> None:
        stat.add(1.0)
        monitor.close()  # ends the child's window

    pid = _in_child(child)
    assert _exit_code(pid) == 0
    monitor.close()
    by_file = _values_by_file(str(logdir), "load.sum")
    assert sorted(by_file.values()) == [[1.0], [100.0]]


def test_dataloader_fork_workers_write_their_own_records_once(logdir, torch):
    """Fork-started DataLoader workers write their own records to files of their own, and no
    copy of the parent's torch.monitor.Stat window."""
    monitor = tb_monitor.init(str(logdir), torch=True, rank_health=False)
    stat = torch.monitor.Stat("fetch", [torch.monitor.Aggregation.COUNT], WINDOW)
    for _ in range(3):
        stat.add(1.0)  # the parent's window (count 3), open while the workers fork

    class Items(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> int:
            put_metric("worker_item", index, "data")
            _next_torch_window()
            stat.add(1.0)  # ends the window before: the inherited one, then the worker's own
            return index

    loader = torch.utils.data.DataLoader(Items(), num_workers=2, multiprocessing_context="fork")
    assert sorted(int(batch) for batch in loader) == [0, 1, 2, 3]
    _next_torch_window()
    stat.add(1.0)  # ends the parent's window
    monitor.close()
    scalars = readers.read_scalars(str(logdir))
    items = scalars[scalars.tag == "data/worker_item"]
    assert sorted(items.value) == [0.0, 1.0, 2.0, 3.0]
    assert len(fs.event_files(str(logdir))) == 3  # the parent's and one per worker
    assert sorted(scalars[scalars.tag == "fetch.count"].value) == [1.0, 1.0, 3.0]


def test_a_forked_child_writes_to_an_object_store_and_exits_at_once(s3_bucket):
    """On s3:// a forked child's records arrive and it exits within seconds."""
    run_dir = f"{s3_bucket}/run"
    monitor = tb_monitor.init(run_dir)
    put_metric("parent", 1, "g")
    monitor.flush()

    def child() -> None:
        put_metric("child", 2, "g")
        started = time.monotonic()
        monitor.close()
        if time.monotonic() - started > 5:
            raise TimeoutError("the child's close took over 5 s")

    started = time.monotonic()
    pid = _in_child(child)
    assert _exit_code(pid) == 0
    assert time.monotonic() - started < 5
    monitor.close()
    scalars = readers.read_scalars(run_dir)
    assert sorted(zip(scalars.tag, scalars.value, strict=True)) == [
        ("g/child", 2.0),
        ("g/parent", 1.0),
    ]

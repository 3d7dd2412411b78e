"""Timeline records read from the event files themselves: the same store as through the provider."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
from pathlib import Path

import pytest
from conftest import need
from plugin_helpers import (
    assert_same_store,
    job_and_extra_run,
    loaded_data_server,
    local_provider,
    picture,
)
from tensorboard import context as tb_context

import tb_plugin.store
from tb_monitor import contract
from tb_monitor.contract import columnar
from tb_monitor.logdir import fs, tfrecord
from tb_plugin import event_files, read_workers
from tb_plugin.event_files import EventFiles, Places
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.store import TimelineStore, UnknownEventError


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A job written by two processes of our writer, and a run ``extra`` of its own."""
    return job_and_extra_run(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def sampled(job):
    """TensorBoard's Rust data server over the job keeping one record per timeline series (what
    the plugin asks of it when it reads the files), loaded."""
    return loaded_data_server(job, keep=1)


def _read(provider, logdir, helpers=None) -> TimelineStore:
    store = TimelineStore(provider, helpers=helpers, files=EventFiles(str(logdir)))
    store.refresh(tb_context.RequestContext(), force=True)
    return store


def _through_provider(logdir) -> TimelineStore:
    store = TimelineStore(local_provider(logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    return store


def test_the_files_give_the_store_a_read_through_the_provider_gives(job, sampled):
    """Over a data server that keeps one record per series, the store reads from the files every
    event, with the same ids, records, details and skipped records as one that read every record
    through TensorBoard's provider."""
    ours, theirs = _read(sampled, job.logdir), _through_provider(job.logdir)
    assert len(ours.snapshot().columns.t) == job.total_events + 1  # and "late"
    assert_same_store(ours, theirs)
    assert picture(ours) == picture(theirs)


def test_the_sampled_data_server_holds_only_each_series_newest_record(job, sampled):
    """The data server the plugin reads beside keeps one record per series, but lists each
    series' newest step, which says what grew."""
    ctx = tb_context.RequestContext()
    listing = sampled.list_tensors(ctx, experiment_id="", plugin_name=contract.PLUGIN_NAME)
    run = next(iter(sorted(listing)))
    tag = next(iter(sorted(listing[run])))
    data = sampled.read_tensors(
        ctx,
        experiment_id="",
        plugin_name=contract.PLUGIN_NAME,
        downsample=2**31 - 1,
        run_tag_filter=tb_plugin.store.tb_provider.RunTagFilter(runs=[run], tags=[tag]),
    )
    assert [d.step for d in data[run][tag]] == [listing[run][tag].max_step]


def test_helpers_read_the_files_into_the_same_store(job, sampled, monkeypatch):
    """A read of many chunks dealt out to helper processes reading the files holds the same
    events, ids and records as one read in TensorBoard's process."""
    monkeypatch.setattr(tb_plugin.store, "CHUNK_BYTES", 1)
    started, helper = [], read_workers._Helper
    monkeypatch.setattr(
        read_workers, "_Helper", lambda *a: started.append(helper(*a)) or started[-1]
    )
    ours = _read(sampled, job.logdir, ReadWorkers(None, processes=2))
    assert len(started) == 2 and [h.process.returncode for h in started] == [0, 0]
    assert_same_store(ours, _read(sampled, job.logdir))


def test_runs_of_records_read_in_c_make_the_same_store_as_record_by_record(
    job, sampled, monkeypatch
):
    """The store holds the same events, ids, records and details whether runs of alike records
    are read in C at once (``contract.SteppedRecords``) or record by record."""
    need("tb_monitor.contract._columnar_index")
    taken = []
    steps_run = columnar._steps_run
    monkeypatch.setattr(columnar, "_steps_run", lambda *a: taken.append(a[1]) or steps_run(*a))
    in_runs = _read(sampled, job.logdir)
    assert taken  # runs were read in C
    monkeypatch.setattr(columnar, "_steps_run", None)
    one_by_one = _read(sampled, job.logdir)
    assert_same_store(in_runs, one_by_one)
    assert picture(in_runs) == picture(one_by_one)


def _copy_job(job, logdir, runs) -> None:
    for run in runs:
        shutil.copytree(os.path.join(job.logdir, run), logdir / run)


def test_a_file_that_grows_is_read_from_where_its_last_read_ended(job, tmp_path, monkeypatch):
    """Files that grow, a torn record at an end included, are read on from where they were:
    every event once, as a store that read them whole."""
    runs = sorted(job.runs)
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, runs)
    files = {}
    for run in runs:  # each file cut in the middle of its last timeline record
        (name,) = [n for n in os.listdir(logdir / run) if fs.is_event_file(n)]
        path = logdir / run / name
        whole = path.read_bytes()
        found = tfrecord.iter_records_at(str(path))
        cut = [o for o, data in found if contract.TIMELINE_PREFIX.encode() in data][-1] + 20
        path.write_bytes(whole[:cut])
        files[path] = whole
    reads = []
    real_read = tfrecord.read_records_from
    monkeypatch.setattr(
        tfrecord,
        "read_records_from",
        lambda p, start=0, **kw: reads.append((p, start)) or real_read(p, start, **kw),
    )
    store = _read(local_provider(logdir), logdir)
    half = len(store.snapshot().columns.t)
    for path, whole in files.items():
        path.write_bytes(whole)
    first, reads[:] = dict(reads), []
    store.refresh(tb_context.RequestContext(), force=True)
    # Each file is read on from where its first read ended: its last whole record.
    assert sorted(first) == sorted(str(path) for path in files)
    assert sorted(path for path, _ in reads) == sorted(first)
    assert all(0 < start < len(files[Path(path)]) for path, start in reads)
    assert half < len(store.snapshot().columns.t) == job.total_events
    assert picture(store) == picture(_through_provider(logdir))


def test_runs_that_come_later_are_read_at_the_next_refresh(job, tmp_path):
    """A run written after the first read is read at the next refresh, nothing read twice."""
    runs = sorted(job.runs)
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, runs[::2])
    store = _read(local_provider(logdir), logdir)
    _copy_job(job, logdir, runs[1::2])
    store.refresh(tb_context.RequestContext(), force=True)
    assert len(store.snapshot().columns.t) == job.total_events
    assert picture(store) == picture(_through_provider(logdir))


def test_runs_the_data_server_has_not_loaded_yet_are_read_from_their_files(job, tmp_path):
    """While TensorBoard's data server is still loading (its listing names some runs, or
    none), the first refresh reads every run there is from the files, each read once."""
    runs = sorted(job.runs)
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, runs[:1])
    loading = local_provider(logdir)  # what the data server has loaded so far: one run
    _copy_job(job, logdir, runs[1:])
    store = _read(loading, logdir)
    assert store.loading() is None
    assert len(store.snapshot().columns.t) == job.total_events
    assert picture(store) == picture(_through_provider(logdir))
    store.refresh(tb_context.RequestContext(), force=True)
    assert len(store.snapshot().columns.t) == job.total_events


def test_a_reads_progress_counts_bytes_of_event_files(job, tmp_path, monkeypatch):
    """Read from the files, a read's progress is in bytes: every byte that grew, once."""
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, sorted(job.runs))
    monkeypatch.setattr(tb_plugin.store, "CHUNK_BYTES", 1)
    seen = []
    store = TimelineStore(local_provider(logdir), files=EventFiles(str(logdir)))
    keep = store._keep_chunk
    monkeypatch.setattr(
        store, "_keep_chunk", lambda chunk: seen.append(store.loading()) or keep(chunk)
    )
    store.refresh(tb_context.RequestContext(), force=True)
    total = sum(
        size for _, sizes in fs.local_event_files(str(logdir)).values() for size in sizes.values()
    )
    assert len(seen) == len(job.runs)
    assert {(p["expected"], p["unit"]) for p in seen} == {(total, "byte")}
    assert [p["done"] for p in seen] == sorted(p["done"] for p in seen)
    assert seen[0]["done"] == 0


def test_an_event_whose_file_is_gone_is_named_when_asked_for(job, tmp_path):
    """The details of an event whose run's files were deleted since are an UnknownEventError
    naming the run, tag and step, not a crash."""
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, sorted(job.runs))
    store = _read(local_provider(logdir), logdir)
    shutil.rmtree(logdir)
    with pytest.raises(UnknownEventError, match="no longer held by its event files"):
        store.event(tb_context.RequestContext(), 0)


def test_an_events_details_are_read_from_its_record_alone(job, sampled, monkeypatch):
    """The details panel reads back the one record an event came in, where it was read: no
    run's files are read whole."""
    store = _read(sampled, job.logdir)

    def whole_run(*args):
        raise AssertionError("a run's files read whole")

    monkeypatch.setattr(event_files, "read_ranges", whole_run)
    ctx = tb_context.RequestContext()
    ids = store.snapshot().columns.ids.tolist()
    for event_id in ids[:: max(1, len(ids) // 50)]:
        assert store.event(ctx, event_id)["id"] == event_id


def test_a_record_whose_place_changed_is_found_in_its_runs_files(job, tmp_path):
    """A file rewritten since it was read (its records moved) still gives every event's
    details, from its run's files read again."""
    logdir = tmp_path / "logs"
    _copy_job(job, logdir, sorted(job.runs))
    store = _read(local_provider(logdir), logdir)
    before = picture(store)
    for run in job.runs:  # a record put in front: every record after it moves
        (name,) = [n for n in os.listdir(logdir / run) if fs.is_event_file(n)]
        path = logdir / run / name
        head = next(tfrecord.iter_records_at(str(path)))[1]
        path.write_bytes(tfrecord.frame(head) + path.read_bytes())
    assert picture(store) == before


def test_a_file_gone_between_listing_and_read_is_a_warning(job, tmp_path, caplog):
    """A file deleted after it was planned is passed over with a warning naming it."""
    missing = str(tmp_path / "gone" / "events.out.tfevents.1.host")
    with caplog.at_level(logging.WARNING, logger=event_files.__name__):
        found = event_files.read_ranges([event_files.FileRange("gone", missing, 0)])
    assert (found.series, found.ends, found.places.series) == ({}, {}, [])
    assert missing in caplog.text


def _flags(**values) -> argparse.Namespace:
    return argparse.Namespace(**{"logdir": "", "logdir_spec": "", **values})


def test_a_local_logdir_is_read_from_its_files(tmp_path):
    """TensorBoard's local ``--logdir`` is read from its files; the data server keeps one record
    per timeline series."""
    files = EventFiles.of_flags(_flags(logdir=str(tmp_path)))
    assert files is not None and files.logdir == str(tmp_path)
    assert event_files.sampling(_flags(logdir=str(tmp_path))) == 1


@pytest.mark.parametrize(
    "flags",
    [
        {"logdir": "s3://bucket/job"},
        {"logdir_spec": "a:/tmp/a,b:/tmp/b"},
        {"logdir": ""},
    ],
    ids=["remote", "logdir_spec", "none"],
)
def test_what_the_plugin_cannot_map_to_files_is_read_through_the_provider(flags):
    """A remote logdir, ``--logdir_spec`` (the data server's run names) or none: every record
    is read through the data provider, and kept by it."""
    assert EventFiles.of_flags(_flags(**flags)) is None
    assert event_files.sampling(_flags(**flags)) == 0


def test_the_environment_turns_file_reads_off(tmp_path, monkeypatch):
    """``TB_MONITOR_READ_FILES=0`` reads a local logdir through the data provider."""
    monkeypatch.setenv(event_files.ENV, "0")
    assert EventFiles.of_flags(_flags(logdir=str(tmp_path))) is None
    assert event_files.sampling(_flags(logdir=str(tmp_path))) == 0


def test_run_names_map_to_their_directories(tmp_path):
    """TensorBoard's run names (``.``, ``a/b``) are the logdir and its subdirectories."""
    files = EventFiles(str(tmp_path))
    assert files.directory(".") == str(tmp_path)
    assert files.directory("a/b") == os.path.join(str(tmp_path), "a", "b")


def test_places_are_kept_per_series_past_the_greatest_step_before():
    """A chunk's places are kept series by series: all of them when each series goes on in
    step order, and where one repeats or goes back (a file read again from its start) only
    its steps past the greatest before, the last kept's included."""
    files = EventFiles("/logs")
    first = {("r", "a"): [(1, 0, 10), (2, 0, 20)], ("r", "b"): [(5, 1, 1)]}
    files.advance({}, Places.of(first, ["f", "g"]))
    again = [(2, 1, 20), (3, 1, 30), (1, 1, 5), (4, 2, 40)]
    then = {("r", "a"): again, ("r", "b"): [(6, 0, 2)], ("r", "c"): []}
    files.advance({"f": 50}, Places.of(then, ["g", "f", "h"]))
    steps, paths, offsets = files._places[("r", "a")]
    assert (list(steps), list(offsets)) == ([1, 2, 3, 4], [10, 20, 30, 40])
    assert [files._paths.values[p] for p in paths] == ["f", "f", "f", "h"]
    assert list(files._places[("r", "b")][0]) == [5, 6]
    assert ("r", "c") not in files._places
    assert files._ends == {"f": 50}


def test_runs_that_grew_by_a_few_bytes_each_are_one_read():
    """Thousands of runs that grew by a few bytes each (a live job's scalars) make one read:
    a run costs its bytes and up to ``run_bytes`` more, its bytes again where fewer."""
    few = {f"r{i}": [event_files.FileRange(f"r{i}", f"/r{i}/e", 100, 140)] for i in range(5000)}
    assert len(event_files.file_chunks(few, 10 * 2**20, 16_000)) == 1
    big = {f"a{i}": [event_files.FileRange(f"a{i}", f"/a{i}/e", 0, 2**20)] for i in range(40)}
    assert len(event_files.file_chunks(big, 10 * 2**20, 16_000)) == 5  # 40 MiB, 0.6 more


def test_a_file_replaced_by_a_shorter_one_is_read_again_from_its_start(tmp_path):
    """A file now shorter than what was read of it was replaced: listed again from byte 0."""
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"x" * 100)
    files = EventFiles(str(tmp_path))
    files.advance({str(path): 100}, None)
    assert files.grown() == {}
    path.write_bytes(b"y" * 40)
    assert files.grown() == {".": [event_files.FileRange(".", str(path), 0, 40)]}


def test_a_torn_tail_is_read_again_only_once_its_file_changed(job, tmp_path):
    """A file whose last record is torn (its writer died mid-write) is not read again at every
    refresh, only once it changed: then what was torn is read whole."""
    logdir = tmp_path / "logs"
    run = sorted(job.runs)[0]
    _copy_job(job, logdir, [run])
    (name,) = [n for n in os.listdir(logdir / run) if fs.is_event_file(n)]
    path = logdir / run / name
    whole = path.read_bytes()
    path.write_bytes(whole[:-5])
    store = _read(local_provider(logdir), logdir)
    torn = len(store.snapshot().columns.t)
    assert store._files.grown() == {}
    path.write_bytes(whole)
    (grown,) = store._files.grown()[run]
    assert (grown.path, grown.size) == (str(path), len(whole)) and grown.start < len(whole) - 5
    store.refresh(tb_context.RequestContext(), force=True)
    assert len(store.snapshot().columns.t) > torn
    assert store._files.grown() == {}

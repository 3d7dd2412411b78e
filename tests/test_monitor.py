"""tb_monitor.init: one call wiring every API to one writer, undone by close()."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta

import pytest
from conftest import need

import tb_monitor
from tb_monitor import contract
from tb_monitor.elastic import events, metrics
from tb_monitor.logdir import readers


def test_init_wires_every_api_to_the_logdir(logdir):
    """Monitor events, metrics of any group and both event destinations land in the logdir."""
    with tb_monitor.init(logdir) as monitor:
        assert monitor.run_dir == str(logdir)
        stat = tb_monitor.Stat("loss", [tb_monitor.Aggregation.MEAN], timedelta(hours=1), 2)
        stat.add(1.0)
        stat.add(3.0)
        tb_monitor.log_event(tb_monitor.Event("epoch", datetime.now(), {"n": 1}))
        metrics.put_metric("steps", 7, "any_group")
        events.record(events.Event("w", events.EventSource.WORKER), "tensorboard")
        events.construct_and_record_rdzv_event("r1", "joined", events.NodeState.RUNNING)
    scalars = {(p.tag, p.value) for p in readers.iter_scalars(logdir)}
    assert scalars == {("loss.mean", 2.0), ("any_group/steps", 7.0)}
    assert sorted(r.kind for r in readers.iter_timeline(logdir)) == [
        "monitor",
        "rendezvous",
        "worker",
    ]


def test_close_restores_what_was_there(logdir):
    """After close(), handlers, the default metric handler and destinations are as before."""
    before_metrics = metrics.getStream("g").handler
    before_rdzv = events.get_logging_handler("dynamic_rendezvous")
    monitor = tb_monitor.init(logdir)
    monitor.close()
    monitor.close()  # idempotent
    assert metrics.getStream("g").handler is before_metrics
    assert events.get_logging_handler("dynamic_rendezvous") is before_rdzv
    with pytest.raises(events.UnknownDestinationError):
        events.get_logging_handler("tensorboard")
    tb_monitor.log_event(tb_monitor.Event("after", datetime.now(), {}))
    assert list(readers.iter_timeline(logdir)) == []


def test_logdir_from_the_environment(logdir, monkeypatch):
    """Without an argument, init writes to $TB_MONITOR_LOGDIR."""
    monkeypatch.setenv(contract.LOGDIR_ENV, str(logdir))
    with tb_monitor.init() as monitor:
        assert monitor.logdir == str(logdir)


def test_missing_logdir_is_a_clear_error(monkeypatch):
    """Without an argument or the environment variable, init names what it needs."""
    monkeypatch.delenv(contract.LOGDIR_ENV, raising=False)
    with pytest.raises(ValueError, match=contract.LOGDIR_ENV):
        tb_monitor.init()


def test_unwritable_logdir_fails_at_init_naming_it(tmp_path):
    """A logdir that cannot be created fails at init with an error naming it."""
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match=str(tmp_path / "file" / "logs")):
        tb_monitor.init(tmp_path / "file" / "logs")


def run_python(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter (process-wide hooks stay out of pytest's)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


WORKER_ENV = {"TORCHELASTIC_RUN_ID": "job1", "RANK": "3"}


def test_torchelastic_worker_writes_its_rank_run(logdir):
    """Inside a torchelastic worker the run directory is <run id>/rank-<RANK>."""
    script = """
        import sys
        import tb_monitor
        from tb_monitor.elastic import metrics
        with tb_monitor.init(sys.argv[1]) as monitor:
            metrics.put_metric("x", 1, "g")
        print(monitor.run_dir)
    """
    done = run_python(script, str(logdir), **WORKER_ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(logdir / "job1" / "rank-3")
    assert [p.run for p in readers.iter_scalars(logdir)] == ["job1/rank-3"]


def test_worker_monitor_closed_off_the_main_thread_undoes_everything(logdir):
    """A worker's monitor closed from another thread unregisters all and closes its sinks."""
    script = """
        import sys, threading
        from datetime import datetime
        import tb_monitor
        from tb_monitor.elastic import events
        from tb_monitor.testing import MemorySink
        memory = MemorySink()
        monitor = tb_monitor.init(sys.argv[1], sinks=[memory])
        closer = threading.Thread(target=monitor.close)
        closer.start()
        closer.join()
        tb_monitor.log_event(tb_monitor.Event("after", datetime.now(), {}))
        try:
            events.get_logging_handler("tensorboard")
        except events.UnknownDestinationError:
            print("unregistered", end=" ")
        print(len(memory.events), memory.closes, monitor.writer.closed)
    """
    done = run_python(script, str(logdir), **WORKER_ENV)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split() == ["unregistered", "0", "1", "True"]


def test_a_failing_undo_still_closes_the_writer_and_raises(logdir, monkeypatch):
    """close() finishes every step and closes the writer before raising the first error."""
    monitor = tb_monitor.init(logdir)
    real_unregister = events.unregister_destination

    def broken(name):
        raise RuntimeError(f"cannot unregister {name}")

    monkeypatch.setattr(events, "unregister_destination", broken)
    with pytest.raises(RuntimeError, match="cannot unregister tensorboard"):
        monitor.close()
    assert monitor.writer.closed
    assert metrics.getStream("g").handler.__class__ is metrics.NullMetricHandler
    real_unregister("tensorboard")


def test_a_second_init_closes_the_first_and_records_once(logdir, caplog):
    """init() while a monitor is open closes that one first, says so, and records once."""
    first = tb_monitor.init(logdir)
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        second = tb_monitor.init(logdir)
    assert first.closed
    assert "closing the monitor already open" in caplog.text
    with second:
        with tb_monitor.Stat("loss", [tb_monitor.Aggregation.MEAN], timedelta(hours=1)) as s:
            s.add(1.0)
        first.close()  # a no-op: it must not undo the second monitor's wiring
        metrics.put_metric("x", 2, "g")
    scalars = sorted((p.tag, p.step, p.value) for p in readers.iter_scalars(logdir))
    assert scalars == [("g/x", 0, 2.0), ("loss.mean", 0, 1.0)]


def test_close_keeps_what_was_installed_after_init(logdir):
    """close() leaves a metric handler or destination installed after init in place."""
    monitor = tb_monitor.init(logdir)
    mine = metrics.NullMetricHandler()
    theirs = logging.NullHandler()
    metrics.configure(mine)
    events.register_destination("tensorboard", theirs)
    monitor.close()
    try:
        assert metrics.getStream("g").handler is mine
        assert events.get_logging_handler("tensorboard") is theirs
    finally:
        metrics.configure(metrics.NullMetricHandler())
        events.unregister_destination("tensorboard")


def test_exit_with_init_alive_is_clean(logdir):
    """A process that exits with a live monitor flushes everything and exits 0, silently."""
    script = """
        import sys
        import tb_monitor
        from tb_monitor.elastic import metrics
        tb_monitor.init(sys.argv[1])
        for i in range(500):
            metrics.put_metric("m", i, "g")
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(logdir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert len(list(readers.iter_scalars(logdir))) == 500


def test_closed_writer_never_breaks_put_metric(logdir, caplog):
    """A monitor whose writer was closed under it logs once and never breaks put_metric."""
    with tb_monitor.init(logdir) as monitor:
        monitor.writer.close()
        with caplog.at_level(logging.ERROR):
            metrics.put_metric("m", 1, "g")
            metrics.put_metric("m", 2, "g")
    assert caplog.text.count("is closed") == 1


def test_close_logs_the_pending_window_of_a_stat_that_outlives_it(logdir):
    """A Stat made inside `with init()` has its pending window written when the block ends."""
    with tb_monitor.init(str(logdir)):
        loss = tb_monitor.Stat("loss", [tb_monitor.Aggregation.MAX], timedelta(hours=1))
        loss.add(2.5)
    try:
        points = [(p.tag, p.value) for p in readers.iter_scalars(logdir)]
        assert points == [("loss.max", 2.5)]
    finally:
        loss.close()


def test_adopting_the_automatic_monitor_adds_the_scripts_sinks(logdir):
    """The script's ``init(sinks=[...])`` in a ``tb-monitor run`` worker keeps the automatic
    monitor and adds its sinks: they get records next to TensorBoard, and no warning."""
    need("torch")
    script = """
        import sys
        import tb_monitor
        from tb_monitor.elastic import metrics
        from tb_monitor.monitor import init_automatic
        from tb_monitor.testing import MemorySink
        automatic = init_automatic()
        memory = MemorySink()
        own = tb_monitor.init(sinks=[memory])
        metrics.put_metric("x", 5, "g")
        own.close()
        print(own is automatic, [m.value for m in memory.metrics], memory.closes)
    """
    env = {**WORKER_ENV, contract.LOGDIR_ENV: str(logdir), "TB_MONITOR_RANK_HEALTH": "0"}
    done = run_python(script, **env)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.split() == ["True", "[5]", "1"]
    assert [(p.tag, p.value) for p in readers.iter_scalars(logdir)] == [("g/x", 5.0)]


def test_active_is_the_open_monitor_until_it_closes(tmp_path):
    """``monitor.active()`` names the monitor ``init`` opened, and None once it is closed."""
    from tb_monitor import monitor

    opened = tb_monitor.init(tmp_path)
    assert monitor.active() is opened
    opened.close()
    assert monitor.active() is None

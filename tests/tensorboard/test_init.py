"""tb_monitor.init: one call wiring every API to one writer, undone by close()."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta

import pytest

import tb_monitor
from tb_monitor import contract, readers
from tb_monitor.elastic import events, metrics


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


def test_torchelastic_worker_writes_its_rank_run(logdir, monkeypatch):
    """Inside a torchelastic worker the run directory is <run id>/rank-<RANK>."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job1")
    monkeypatch.setenv("RANK", "3")
    with tb_monitor.init(logdir) as monitor:
        metrics.put_metric("x", 1, "g")
    assert monitor.run_dir == str(logdir / "job1" / "rank-3")
    assert [p.run for p in readers.iter_scalars(logdir)] == ["job1/rank-3"]


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

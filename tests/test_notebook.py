"""tb_monitor.notebook: the timeline figure and the restart summary of an elastic job."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import need
from step_time_jobs import median_of, p95_of, write_step_quantiles

from tb_monitor import notebook, timeline
from tb_monitor.logdir import readers
from tb_monitor.testing import generate_job, generate_rank_windows


@pytest.fixture
def plt():
    """matplotlib's pyplot on the non-interactive Agg backend; figures closed afterwards."""
    matplotlib = need("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


@pytest.fixture
def job(logdir):
    """A synthetic two-node job (2 workers each) with one failed attempt and a restart."""
    return generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)


@pytest.fixture
def rows(logdir, job):
    """The job's decoded timeline records."""
    return list(readers.decode_timeline(readers.iter_timeline(logdir)))


def test_timeline_draws_one_row_per_lane(logdir, job, plt):
    """The y axis has one labelled row per lane, rendezvous and agents above the ranks."""
    figure = notebook.timeline(logdir)
    (ax,) = figure.axes
    labels = [tick.get_text() for tick in ax.get_yticklabels()]
    assert labels[:4] == [
        "rendezvous: node-000 (pid 4000)",
        "rendezvous: node-001 (pid 4097)",
        "agent: agent-node-000-4000",
        "agent: agent-node-001-4097",
    ]
    assert labels[4:8] == [f"worker: rank {rank}" for rank in range(4)]
    assert len(labels) == len(
        {timeline.lane_of(r) for r in list(readers.decode_timeline(readers.iter_timeline(logdir)))}
    )


def test_timeline_colours_intervals_by_state_and_marks_the_restart(logdir, job, plt):
    """Worker attempts are bars in their state's colour, the ranks that went down with the failed
    one STOPPED_BY_RESTART; the root cause is annotated; the restart is a dashed line."""
    figure = notebook.timeline(logdir)
    (ax,) = figure.axes
    legend = {text.get_text() for text in ax.get_legend().get_texts()}
    assert {"FAILED", "STOPPED_BY_RESTART", "SUCCEEDED"} <= legend
    assert "TERMINATED" not in legend  # the agent's terminations are the restart's collateral
    texts = [text.get_text() for text in ax.texts]
    assert texts[-1] == "restart 1"
    assert texts[:-1] == ["root cause: OutOfMemoryError: CUDA out of memory (rank 2)"]
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1


def test_timeline_takes_a_read_events_frame(logdir, job, plt):
    """notebook.timeline(read_events(logdir)) draws the same lanes as the logdir itself."""
    need("pandas")
    from tb_monitor import read_events

    by_frame = notebook.timeline(read_events(logdir))
    by_logdir = notebook.timeline(logdir)
    labels = [[t.get_text() for t in f.axes[0].get_yticklabels()] for f in (by_frame, by_logdir)]
    assert labels[0] == labels[1] and labels[0]


def test_timeline_rejects_other_arguments_at_the_door(plt):
    """Anything but a logdir or a DataFrame is a TypeError naming the value, not a reader error."""
    with pytest.raises(TypeError, match=r"timeline\(\) takes a logdir .* not dict"):
        notebook.timeline({"logdir": "runs"})


def test_notebook_restarts_names_the_root_cause(logdir, job):
    """notebook.restarts is the analysis: attempt 0's root cause and the ranks that went down."""
    need("pandas")
    first = notebook.restarts(logdir).iloc[0]
    assert first["root_cause_rank"] == 2 and first["collateral_ranks"] == [0, 1, 3]


def test_timeline_draws_into_a_given_axes(logdir, job, plt):
    """Given an axes, the figure is drawn there and its figure is returned."""
    figure, ax = plt.subplots()
    assert notebook.timeline(logdir, ax=ax) is figure
    assert ax.get_yticklabels()


def test_timeline_of_an_empty_logdir_names_it(logdir, plt):
    """No timeline events: a ValueError naming the logdir."""
    with pytest.raises(ValueError, match="holds no timeline events") as info:
        notebook.timeline(logdir)
    assert str(logdir) in str(info.value)


def test_missing_matplotlib_names_the_extra(logdir, job, monkeypatch):
    """Without matplotlib, the error says which extra to install."""
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'tb-monitor\[notebook\]'"):
        notebook.timeline(logdir)


@pytest.fixture
def straggling_job(logdir):
    """The restarted job of ``job``, its 4 ranks recording health with rank 1 computing 1.5x."""
    job = generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)
    generate_rank_windows(job.logdir, 4, 0.05, slow_ranks=[1], start=job.start)
    return job


def _displayed(value) -> dict[str, str]:
    """What IPython's display machinery shows for ``value``, by MIME type."""
    IPython = need("IPython")
    data, _ = IPython.core.formatters.DisplayFormatter().format(value)
    return data


def test_the_displayed_report_names_the_root_cause_and_stragglers(straggling_job):
    """A notebook shows notebook.report(logdir) as the report's text: the root cause of the
    failed attempt, the ranks that went down with it, and the straggler."""
    html = _displayed(notebook.report(straggling_job.logdir))["text/html"]
    assert "root cause      rank 2 on node-001" in html
    assert "went down with  ranks 0, 1, 3" in html
    assert "straggler       rank 1 x1." in html


def test_the_displayed_report_is_the_report_commands_text(straggling_job):
    """str() of the report and its notebook display are the text ``tb-monitor report`` prints."""
    import html
    import io

    from tb_monitor.cli import report as report_command

    out = io.StringIO()
    report_command.main([straggling_job.logdir], out=out)
    shown = notebook.report(straggling_job.logdir)
    assert str(shown) == out.getvalue()
    assert _displayed(shown)["text/html"] == f"<pre>{html.escape(out.getvalue())}</pre>"


def test_the_displayed_report_escapes_what_it_quotes(tmp_path):
    """Text the report quotes is never read as markup: a logdir named like a tag is escaped."""
    job = generate_job(tmp_path / "<img src=x onerror=alert(1)>", restarts=1)
    html = _displayed(notebook.report(job.logdir))["text/html"]
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


@pytest.fixture
def step_times_job(logdir):
    """The restarted job of ``job``, its 4 ranks recording 120 windows of step-time quantiles."""
    job = generate_job(logdir, nodes=2, workers_per_node=2, restarts=1)
    write_step_quantiles(job.logdir, 4, 120, start=job.start, run_id=job.run_id)
    return job


def _lines(ax, **match) -> list:
    return [
        line
        for line in ax.get_lines()
        if all(getattr(line, f"get_{k}")() == v for k, v in match.items())
    ]


def test_step_times_draws_every_ranks_median_and_the_median_ranks(step_times_job, plt):
    """One grey line per rank at its recorded medians, and the median rank's median and p95."""
    (ax,) = notebook.step_times(step_times_job.logdir).axes
    grey = _lines(ax, color="0.6")
    assert len(grey) == 4
    expected = np.array([[median_of(r, i) for i in range(120)] for r in range(4)])
    np.testing.assert_allclose([line.get_ydata() for line in grey], expected, rtol=1e-5)
    (typical,) = _lines(ax, label="median rank")
    np.testing.assert_allclose(typical.get_ydata(), np.median(expected, axis=0), rtol=1e-5)
    (tail,) = _lines(ax, label="median rank's p95")
    assert (tail.get_ydata() > typical.get_ydata()).all()
    assert ax.get_ylabel() == "step time (s)" and ax.get_title() == "step time per rank"


def test_step_times_highlights_the_ranks_asked_for_with_their_p95(step_times_job, plt):
    """``ranks=[2]``: rank 2's median and its long p95 in colour, from its windows."""
    (ax,) = notebook.step_times(step_times_job.logdir, ranks=[2]).axes
    (median,) = _lines(ax, label="rank 2")
    (tail,) = _lines(ax, label="rank 2 p95")
    np.testing.assert_allclose(median.get_ydata(), [median_of(2, i) for i in range(120)], rtol=1e-5)
    np.testing.assert_allclose(tail.get_ydata(), [p95_of(2, i) for i in range(120)], rtol=1e-5)
    with pytest.raises(ValueError, match=r"ranks \[7\] recorded no step times"):
        notebook.step_times(step_times_job.logdir, ranks=[7])


def test_step_times_marks_each_attempt_and_its_root_cause(step_times_job, plt):
    """A vertical line at each attempt's start and at the failed attempt's root cause, at their
    times on the step-time axis."""
    from tb_monitor.analysis.attempts import attempts
    from tb_monitor.analysis.grid import RankGrid
    from tb_monitor.analysis.sources import timeline_rows
    from tb_monitor.timeline import spans

    (ax,) = notebook.step_times(step_times_job.logdir).axes
    rows = timeline_rows(step_times_job.logdir, "timeline")
    found = attempts(rows, spans(rows))
    t0 = RankGrid.from_logdir(step_times_job.logdir).extent[0]
    expected = sorted(
        [a.start - t0 for a in found] + [a.root_cause.time - t0 for a in found if a.root_cause]
    )
    vertical = sorted(
        line.get_xdata()[0] for line in ax.get_lines() if len(set(line.get_xdata())) == 1
    )
    assert len(found) == 2 and vertical == pytest.approx(expected)
    labels = {text.get_text() for text in ax.texts}
    assert labels == {"attempt 0 started", "attempt 1 restarted", "rank 2 failed"}


def test_step_times_of_an_empty_logdir_says_so(logdir, plt):
    """No rank health recorded: an empty figure that says so."""
    (ax,) = notebook.step_times(logdir).axes
    assert ax.get_title() == "no rank health recorded"

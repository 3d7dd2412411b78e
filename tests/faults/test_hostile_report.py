"""Event text in ``tb-monitor report``'s terminal output: no escape sequence, carriage return or
bidi override an event recorded reaches the terminal raw; each shows as its escape."""

from __future__ import annotations

import dataclasses
import unicodedata

import pytest

from tb_monitor.analysis.health import job_report
from tb_monitor.analysis.report import render
from tb_monitor.analysis.report_text import visible
from tb_monitor.synthetic import _plan
from tb_monitor.testing import generate_job

#: What a hostile host name and exception message carry: a colour, a line erased and rewritten,
#: an override turning what follows around, an isolate closer, a C1 CSI and a zero-width space.
HOSTILE = "\x1b[32m\r\x1b[2K\u202eDEDEECCUS\u2069\x9b31m\u200b"


def _raw_controls(text: str) -> set[str]:
    """Characters of ``text`` a terminal would act on or reorder by (a newline is ours)."""
    return {
        ch
        for ch in text
        if ch != "\n" and unicodedata.category(ch) in {"Cc", "Cf", "Zl", "Zp", "Cs"}
    }


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("node-7", "node-7"),
        ("a\x1b[31mb", "a\\x1b[31mb"),
        ("ok\u202eKO", "ok\\u202eKO"),
        ("line\nbreak\ttab", "line\\x0abreak\\x09tab"),
        ("\x9b\u2028\U000e0041", "\\x9b\\u2028\\U000e0041"),
        ("café 東京 1\u00a0000", "café 東京 1\u00a0000"),
    ],
)
def test_visible_escapes_what_a_terminal_would_act_on(text, shown):
    """Controls, format characters and separators show as escapes; other text is unchanged."""
    assert visible(text) == shown


def test_a_hostile_host_name_and_run_id_reach_the_report_escaped(tmp_path, monkeypatch):
    """A run id and a failed attempt's host holding escapes and overrides print as escapes."""
    nodes = _plan.Job.node_list
    monkeypatch.setattr(
        _plan.Job,
        "node_list",
        lambda job: [dataclasses.replace(n, host=n.host + HOSTILE) for n in nodes(job)],
    )
    job = generate_job(tmp_path / "logs", nodes=2, workers_per_node=1, run_id="job" + HOSTILE)
    text = render(job_report(job.logdir))
    assert _raw_controls(text) == set()
    assert f"job job{visible(HOSTILE)}: SUCCEEDED" in text
    assert f"on node-001{visible(HOSTILE)} at" in text

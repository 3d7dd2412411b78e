"""Every test's duration, written to ``.pytest-durations.json`` at the end of each run.

A pytest plugin, loaded by ``pytest_plugins`` in tests/conftest.py. pytest's ``--durations``
prints only the slowest; this file keeps every test's setup, call and teardown times, the
slowest first, so the tests that make the suite long are known after any run (the fast lane's
or the whole suite's; each run replaces the file). Under pytest-xdist the workers' reports
reach the controller, which alone writes the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FILE = ".pytest-durations.json"

_durations: dict[str, dict[str, float | str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep each phase's duration of each test, and the test's outcome."""
    test = _durations.setdefault(report.nodeid, {"outcome": "passed"})
    test[report.when] = round(report.duration, 3)
    if report.outcome != "passed":
        test["outcome"] = report.outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the file once, on the controller (never on an xdist worker), the slowest first."""
    if hasattr(session.config, "workerinput") or not _durations:
        return
    for test in _durations.values():
        test["total"] = round(sum(v for k, v in test.items() if k != "outcome"), 3)
    tests = sorted(_durations.items(), key=lambda item: item[1]["total"], reverse=True)
    path = Path(session.config.rootpath) / FILE
    path.write_text(json.dumps(dict(tests), indent=1) + "\n")

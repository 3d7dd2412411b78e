"""An agent's capture on demand: every agent begins when all have seen the request, and py-spy
(whose native read pauses a worker, stalling the whole job) reads only after the profiles."""

from __future__ import annotations

import json

import pytest

from tb_monitor.launcher import capture, stack_capture
from tb_monitor.launcher.capture import ALIGN_S, CapturePoller, begin_in
from tb_monitor.launcher.stack_capture import Dump

T = 1_800_000_000.0


def test_an_agent_that_sees_the_request_at_once_waits_until_every_agent_has():
    """Seen 1 s after it was made: the capture begins ALIGN_S after it, the rest of that."""
    assert begin_in(T, T + 1.0) == pytest.approx(ALIGN_S - 1.0)


def test_an_agent_that_sees_the_request_late_begins_at_once():
    """Seen after ALIGN_S: no wait."""
    assert begin_in(T, T + ALIGN_S + 2.0) == 0.0


def test_a_clock_behind_the_requesters_waits_no_longer_than_align_s():
    """An agent's clock 60 s behind the requester's waits ALIGN_S, not a minute."""
    assert begin_in(T, T - 60.0) == ALIGN_S


def test_a_capture_without_a_request_time_begins_at_once():
    """No request time known: no wait."""
    assert begin_in(None, T) == 0.0


class _Waits:
    """The poller's stop event, recording each wait instead of sleeping."""

    def __init__(self, log: list) -> None:
        self.log = log

    def wait(self, seconds: float) -> bool:
        self.log.append(("wait", seconds))
        return False


@pytest.fixture
def captured(tmp_path, monkeypatch) -> tuple[list, list, CapturePoller]:
    """A poller of two workers (ranks 0, 1) whose worker servers and py-spy are stand-ins: the
    order of its waits and reads, and the records it wrote."""
    log: list = []
    records: list = []

    def ask_all(path: str, seconds: float):
        log.append(("asked", seconds))
        return {"profile": b"{}", "stacks": b"faulthandler"}, {}

    def spy(workers, py_spy):
        pids = [pid for pid, _ in workers]
        log.append(("py-spy", pids))
        return {pid: Dump("py-spy --native", f"py-spy of {pid}", ()) for pid in pids}

    monkeypatch.setattr(capture, "_ask_all", ask_all)
    monkeypatch.setattr(stack_capture, "capture", spy)
    poller = CapturePoller(
        str(tmp_path),
        str(tmp_path / "sockets"),
        lambda: [(100, 0, "S"), (101, 1, "S")],
        lambda pid, **fields: records.append((pid, fields)),
        lambda: "job",
        py_spy="py-spy",
        clock=lambda: T + 1.0,
    )
    poller._stop = _Waits(log)
    poller.capture("c1", 2.0, "on request", at=T)
    return log, records, poller


def test_py_spy_reads_after_the_profiles_seconds(captured):
    """The agent waits for the others, asks its workers, waits out the profile, then py-spy."""
    log, _, _ = captured
    waits = [entry for entry in log if entry[0] == "wait"]
    assert waits == [("wait", pytest.approx(ALIGN_S - 1.0)), ("wait", 2.0)]
    assert log.index(("py-spy", [100, 101])) > log.index(("wait", 2.0))


def test_each_rank_gets_its_files_with_py_spys_stacks_first(captured, tmp_path):
    """Both ranks recorded with their files; the stacks file holds py-spy's read, then
    faulthandler's."""
    _, records, _ = captured
    assert [pid for pid, _ in records] == [100, 101]
    files = json.loads(records[0][1]["files"])
    assert (tmp_path / files["stacks"]).read_text() == "py-spy of 100\nfaulthandler"
    assert set(files) == {"profile", "stacks"}

"""A capture on demand: every rank's stacks, Flight Recorder, wait counters and profile, at once.

``tb-monitor capture LOGDIR`` writes a request into the logdir (``request``:
``.tb-monitor/capture-requests/<id>.json``); every agent of a job writing there looks for new
requests every ``POLL_S`` (``CapturePoller``, a daemon thread of its own: a capture lasts its
profile's seconds and must not hold back the rank watch). A request is a file because the logdir
is the one place every agent of the job and the user's machine share, a local directory or an
``s3://`` prefix alike, on any number of hosts; no agent needs a port, and the command needs not
know where the agents run. An agent takes a request once, and only one made after it started
and within ``REQUEST_TTL_S`` (a request left from an earlier job fires nothing).

An agent asks each of its workers at the same moment (a thread each) through torch's worker
server on its unix socket (``launcher.worker_server``): the profile for ``seconds``,
``dump_traceback``, ``fr_trace_json``, ``wait_counter_values``; py-spy reads every thread's
stacks too, native frames included, where it is there (``launcher.stack_capture``). Every agent
begins ``ALIGN_S`` after the request was made, when all have seen it, so that the ranks'
profiles cover the same seconds, and py-spy reads after them: its native read pauses a worker,
and one paused worker stalls every rank of the job, so a pause inside another node's profile
left that node's profile empty (a fresh-clone CI run: the agents' profiles 3.4 s apart, one
node's py-spy inside the other's). The files
land in ``<run id>/captures/<id>/rank-<N>/`` (``profile.json``, a chrome trace that Perfetto
loads; ``stacks.txt``; ``flight_recorder.json``; ``wait_counters.json``), and each rank's
capture is one timeline record (``contract.RANK_CAPTURE``) naming them, which ``tb-monitor
report`` lists (``analysis.captures``) and the Ranks view links.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tb_monitor import contract
from tb_monitor.launcher import stack_capture, worker_server
from tb_monitor.logdir import fs

__all__ = [
    "ALIGN_S",
    "FILES",
    "POLL_S",
    "REQUESTS_DIR",
    "REQUEST_TTL_S",
    "CapturePoller",
    "capture_dir",
    "request",
]

#: Where requests are written, below the logdir.
REQUESTS_DIR = ".tb-monitor/capture-requests"
#: How often an agent looks for a request.
POLL_S = 3.0
#: Every agent begins a capture this long after the request was made (by the requester's clock,
#: waiting no longer than this on its own): by then each has looked for it.
ALIGN_S = POLL_S + 1.0
#: A request older than this is not taken (no job saw it in time).
REQUEST_TTL_S = 120.0
#: The longest a worker may take to answer beyond its profile's seconds.
ANSWER_SLACK_S = 30.0
#: What each rank's capture holds: file name, and the worker server's handler behind it.
FILES = {
    "profile": ("profile.json", worker_server.PROFILE_HANDLER),
    "stacks": ("stacks.txt", "dump_traceback"),
    "flight_recorder": ("flight_recorder.json", "fr_trace_json"),
    "wait_counters": ("wait_counters.json", "wait_counter_values"),
}
_log = logging.getLogger("tb_monitor")


def request(logdir: str, seconds: float, reason: str = "on request") -> str:
    """Ask the agents of the jobs writing to ``logdir`` for a capture of ``seconds`` of
    profile; returns the capture's id."""
    capture_id = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    body = {"id": capture_id, "seconds": seconds, "at": time.time(), "reason": reason}
    directory = fs.join(logdir, REQUESTS_DIR)
    fs.makedirs(directory)
    fs.replace_file(fs.join(directory, f"{capture_id}.json"), json.dumps(body).encode())
    return capture_id


def capture_dir(run_id: str, capture_id: str, rank: int) -> str:
    """Where one rank's capture lands, relative to the logdir."""
    return f"{contract.encode_part(run_id)}/captures/{contract.encode_part(capture_id)}/rank-{rank}"


class CapturePoller:
    """Takes the capture requests of ``logdir`` for the workers ``workers()`` names (``(pid,
    rank, state)`` each); records each rank's capture through ``record(pid, **fields)``."""

    def __init__(
        self,
        logdir: str,
        directory: str,
        workers: Callable[[], list[tuple[int, int, str | None]]],
        record: Callable[..., Any],
        run_id: Callable[[], str],
        *,
        py_spy: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.logdir, self.directory = logdir, directory
        self._workers, self._record, self._run_id = workers, record, run_id
        self._py_spy, self._clock = py_spy, clock
        self._started = clock()
        self._taken: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CapturePoller:
        self._thread = threading.Thread(target=self._run, name="tb_monitor-capture", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # never let capturing break the agent; say why, go on
                _log.warning("tb_monitor: a capture failed", exc_info=True)

    def poll(self) -> list[str]:
        """Take every new request of the logdir; the ids taken."""
        taken = []
        for wanted in self._new_requests():
            self._taken.add(wanted["id"])
            seconds = float(wanted.get("seconds") or 5.0)
            self.capture(wanted["id"], seconds, wanted.get("reason"), float(wanted["at"]))
            taken.append(wanted["id"])
        return taken

    def _new_requests(self) -> list[dict[str, Any]]:
        directory = fs.join(self.logdir, REQUESTS_DIR)
        now, found = self._clock(), []
        for name in sorted(fs.listing(directory)):
            if not name.endswith(".json") or name[: -len(".json")] in self._taken:
                continue
            try:
                wanted = json.loads(fs.read_bytes(fs.join(directory, name)))
                at = float(wanted["at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being written, or not ours: looked at again next time
            self._taken.add(name[: -len(".json")])
            if self._started - POLL_S <= at and now - at <= REQUEST_TTL_S:
                found.append(wanted)
        return found

    def capture(
        self, capture_id: str, seconds: float, reason: str | None = None, at: float | None = None
    ) -> None:
        """Every worker's capture, all at once (``ALIGN_S`` after ``at``, the request's time,
        where given); py-spy reads every worker after the profiles; each rank's files and record
        written."""
        self._stop.wait(begin_in(at, self._clock()))
        workers = self._workers()
        asked: dict[int, tuple[dict[str, bytes], dict[str, str]]] = {}

        def ask(pid: int) -> None:
            asked[pid] = _ask_all(worker_server.socket_path(self.directory, pid), seconds)

        threads = [
            threading.Thread(target=ask, args=(pid,), name="tb_monitor-capture-rank", daemon=True)
            for pid, _, _ in workers
        ]
        for thread in threads:
            thread.start()
        self._stop.wait(seconds)  # the profiles' seconds: no worker paused inside them
        spied = stack_capture.capture(((pid, state) for pid, _, state in workers), self._py_spy)
        for thread in threads:
            thread.join(seconds + ANSWER_SLACK_S + 5.0)
        what = {"capture": capture_id, "reason": reason or "on request", "seconds": seconds}
        for pid, rank, _ in workers:
            answers, errors = asked.get(pid) or ({}, dict.fromkeys(FILES, "no answer in time"))
            if (dump := spied.get(pid)) is not None:  # every thread, native frames too, first
                answers["stacks"] = dump.text.encode() + b"\n" + answers.get("stacks", b"")
            self._write(pid, rank, what, answers, errors)

    def _write(
        self,
        pid: int,
        rank: int,
        what: dict[str, Any],
        answers: dict[str, bytes],
        errors: dict[str, str],
    ) -> None:
        """One rank's files and its capture record (``what``: the capture's id, reason and
        seconds, as the record holds them)."""
        relative = capture_dir(self._run_id(), what["capture"], rank)
        files = {}
        for kind, data in answers.items():
            path = f"{relative}/{FILES[kind][0]}"
            try:
                fs.makedirs(fs.join(self.logdir, relative))
                fs.replace_file(fs.join(self.logdir, path), data)
                files[kind] = path
            except OSError as exc:
                errors[kind] = f"not written: {exc}"
        self._record(
            pid,
            **what,
            files=json.dumps(files),
            errors=json.dumps(errors),
            message=f"captured {', '.join(files) or 'nothing'} ({what['reason']})",
        )


def begin_in(at: float | None, now: float) -> float:
    """Seconds until a capture requested at ``at`` begins: ``ALIGN_S`` after it, never more
    than ``ALIGN_S`` from ``now`` (a clock behind the requester's), at once where that passed
    or ``at`` is unknown."""
    if at is None:
        return 0.0
    return min(max(at + ALIGN_S - now, 0.0), ALIGN_S)


def _ask_all(path: str, seconds: float) -> tuple[dict[str, bytes], dict[str, str]]:
    """Each handler's answer from the worker server on ``path`` (the profile asked first: the
    others answer while it runs, from the server's other threads), and each failure's words."""
    answers: dict[str, bytes] = {}
    errors: dict[str, str] = {}

    def profile() -> None:
        try:
            answers["profile"] = worker_server.ask(
                path, FILES["profile"][1], seconds + ANSWER_SLACK_S, duration=seconds
            )
        except OSError as exc:
            errors["profile"] = str(exc)

    profiling = threading.Thread(target=profile, name="tb_monitor-profile", daemon=True)
    profiling.start()
    for kind in _kinds_but_profile():
        try:
            answers[kind] = worker_server.ask(path, FILES[kind][1], ANSWER_SLACK_S)
        except OSError as exc:
            errors[kind] = str(exc)
    profiling.join(seconds + ANSWER_SLACK_S + 1.0)
    return answers, errors


def _kinds_but_profile() -> Iterable[str]:
    return (kind for kind in FILES if kind != "profile")

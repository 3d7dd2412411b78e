"""The agent-side rank watcher and the workers' stack dumps, on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tb_monitor import contract
from tb_monitor.launcher import rank_watch
from tb_monitor.launcher.rank_watch import RankWatch, Worker, process_state, view_of
from tb_monitor.rank import stacks

#: A worker as ``tb-monitor run`` starts it, cut to what the watcher needs: its stack dumps
#: installed, then a loop in Python, or a C call that holds the GIL (``PyDLL`` keeps it).
_WORKER = textwrap.dedent(
    """
    import ctypes, sys, time
    from tb_monitor.rank import stacks
    stacks.install()

    def stuck_in_c():
        print("ready", flush=True)
        ctypes.PyDLL(None).sleep(int(sys.argv[1]))

    def loop():
        print("ready", flush=True)
        while True:
            time.sleep(0.05)

    stuck_in_c() if sys.argv[1] != "0" else loop()
    """
)


@pytest.fixture
def start_worker(tmp_path):
    env = {
        **os.environ,
        contract.STACKS_DIR_ENV: str(tmp_path),
        "TB_MONITOR_HEARTBEAT_S": "0.2",
    }
    started: list[subprocess.Popen] = []

    def start(c_sleep_s: int = 0) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(c_sleep_s)], env=env, stdout=subprocess.PIPE
        )
        started.append(proc)
        assert proc.stdout.readline().strip() == b"ready"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()


#: The wait for stacks before a stop, made long here so that not waiting for it shows.
WAIT_CAP_S = 10.0


def _watch(tmp_path, proc: subprocess.Popen, records: list) -> RankWatch:
    watch = RankWatch(
        records.append,
        str(tmp_path),
        signum=stacks.stack_signal({}),
        interval_s=0.2,
        silent_after_s=1.0,
        run_id="job",
    )
    watch.watch([Worker(proc.pid, rank=3, local_rank=1)])
    return watch


def _look_until(watch: RankWatch, records: list, name: str, timeout_s: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        watch.look()
        found = [r for r in records if r.name == name]
        if found:
            return found[-1].metadata
        time.sleep(0.1)
    raise AssertionError(f"no {name} record in {timeout_s} s: {records}")


def test_stack_signal_default_is_sigurg():
    """Workers dump on SIGURG unless told otherwise (SIGUSR1 is Lightning's)."""
    assert stacks.stack_signal({}) == signal.SIGURG
    assert not stacks.ends_by_default(signal.SIGURG)
    assert stacks.ends_by_default(signal.SIGRTMIN + 3)


def test_default_stack_signal_is_ignored_without_a_handler():
    """A process with no handler for the default stacks signal outlives it and exits 0."""
    code = "import os, sys; os.kill(os.getpid(), int(sys.argv[1])); print('alive', flush=True)"
    signum = stacks.stack_signal({})
    done = subprocess.run([sys.executable, "-c", code, str(signum)], capture_output=True)
    assert (done.returncode, done.stdout) == (0, b"alive\n")


#: A worker that exits normally, with a slow finish after its handler is gone: what the
#: interpreter's finalization does to a real one (its pulse stops, faulthandler unregisters).
_EXITING_WORKER = textwrap.dedent(
    """
    import atexit, ctypes, faulthandler, sys
    from tb_monitor.rank import stacks

    def slow_finish():  # registered first: runs after the stacks' own atexit hook
        faulthandler.unregister(dumps.signum)
        ctypes.PyDLL(None).sleep(int(sys.argv[1]))  # C holding the GIL: no pulse

    atexit.register(slow_finish)
    dumps = stacks.install()
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_a_worker_exiting_normally_is_never_signalled(tmp_path):
    """A worker that withdrew at exit is not read as silent nor signalled, even with a real-time
    stacks signal (which would kill it once its handler is gone): it exits 0."""
    env = {
        **os.environ,
        contract.STACKS_DIR_ENV: str(tmp_path),
        contract.STACKS_SIGNAL_ENV: "SIGRTMIN+3",
        "TB_MONITOR_HEARTBEAT_S": "0.1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", _EXITING_WORKER, "2"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout.readline().strip() == b"ready"
    records: list = []
    watch = RankWatch(
        records.append,
        str(tmp_path),
        signum=signal.SIGRTMIN + 3,
        interval_s=0.1,
        silent_after_s=0.5,
        run_id="job",
    )
    watch.watch([Worker(proc.pid, rank=0, local_rank=0)])
    proc.stdin.close()  # it exits: withdraws, then 2 s with no pulse and no handler
    deadline = time.monotonic() + 15
    while proc.poll() is None and time.monotonic() < deadline:
        watch.look()
        time.sleep(0.1)
    watch.stacks_before_stop(wait_s=0.2)  # the agent's stop after it, too, asks nothing
    assert proc.wait(timeout=5) == 0
    assert records == []
    assert not os.listdir(tmp_path)  # its stacks and pulse files are gone


def test_stack_signal_names_and_off():
    """The stacks signal is configurable by name or number, and can be turned off."""
    env = contract.STACKS_SIGNAL_ENV
    assert stacks.stack_signal({env: "USR2"}) == signal.SIGUSR2
    assert stacks.stack_signal({env: "40"}) == 40
    assert stacks.stack_signal({env: "off"}) is None


def test_stack_signal_rejects_a_non_signal_by_name():
    """A value that names no signal is a ValueError quoting it."""
    with pytest.raises(ValueError, match="SIGNOPE"):
        stacks.stack_signal({contract.STACKS_SIGNAL_ENV: "SIGNOPE"})


def test_view_of_process_states():
    """Stopped (T), in the kernel (D), silent (no pulse), responding, and ended."""
    assert view_of("T", 0.0, 5.0) == rank_watch.STOPPED
    assert view_of("D", 0.0, 5.0) == rank_watch.UNINTERRUPTIBLE
    assert view_of("S", 9.0, 5.0) == rank_watch.SILENT
    assert view_of("R", 1.0, 5.0) == ""
    assert view_of("S", None, 5.0) == ""  # no pulse file yet: cannot tell
    assert view_of(None, 1.0, 5.0) is None


def test_process_state_of_a_stopped_process(start_worker):
    """/proc says T once a process is SIGSTOPped."""
    proc = start_worker()
    os.kill(proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while process_state(proc.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process_state(proc.pid) == "T"


def test_a_stopped_worker_is_recorded_stopped_then_responding(tmp_path, start_worker):
    """SIGSTOP: one SILENT record, 'stopped'; SIGCONT: RESPONDING, and its stacks follow."""
    proc, records = start_worker(), []
    watch = _watch(tmp_path, proc, records)
    os.kill(proc.pid, signal.SIGSTOP)
    seen = _look_until(watch, records, contract.RANK_SEEN)
    assert (seen["state"], seen["seen"], seen["global_rank"]) == ("SILENT", "stopped", 3)
    assert not [r for r in records if r.name == contract.RANK_STACKS]  # stopped: no stacks
    os.kill(proc.pid, signal.SIGCONT)
    dumped = _look_until(watch, records, contract.RANK_STACKS)
    assert "in loop" in dumped["stacks"]
    assert any(r.metadata["state"] == "RESPONDING" for r in records)


def test_a_worker_holding_the_gil_in_c_gives_its_python_stacks(tmp_path, start_worker):
    """A main thread blocked in C with the GIL: 'alive but silent', and its stacks name it."""
    proc, records = start_worker(c_sleep_s=60), []
    watch = _watch(tmp_path, proc, records)
    seen = _look_until(watch, records, contract.RANK_SEEN)
    assert seen["seen"] == rank_watch.SILENT
    dumped = _look_until(watch, records, contract.RANK_STACKS)
    assert "stuck_in_c" in dumped["stacks"]
    assert "Current thread" in dumped["stacks"] or "Thread 0x" in dumped["stacks"]
    for _ in range(4):  # writing its dump is no sign of life: it stays silent
        time.sleep(0.25)
        watch.look()
    assert [r.metadata["state"] for r in records if r.name == contract.RANK_SEEN] == ["SILENT"]


def test_stacks_before_stop_are_taken_at_once(tmp_path, start_worker):
    """Before the agent stops its workers, each live one's stacks are recorded, quickly."""
    proc, records = start_worker(), []
    watch = _watch(tmp_path, proc, records)
    started = time.monotonic()
    watch.stacks_before_stop(wait_s=WAIT_CAP_S)
    took = time.monotonic() - started
    (dumped,) = [r.metadata for r in records if r.name == contract.RANK_STACKS]
    assert "in loop" in dumped["stacks"] and "before the agent stopped it" in dumped["message"]
    assert took < WAIT_CAP_S / 2  # a responsive worker answers at once, well before the cap


def test_stacks_before_stop_skip_a_stopped_worker(tmp_path, start_worker):
    """A stopped worker cannot dump: nothing is waited for and nothing is recorded."""
    proc, records = start_worker(), []
    watch = _watch(tmp_path, proc, records)
    os.kill(proc.pid, signal.SIGSTOP)
    while process_state(proc.pid) != "T":
        time.sleep(0.02)
    started = time.monotonic()
    watch.stacks_before_stop(wait_s=WAIT_CAP_S)
    assert time.monotonic() - started < WAIT_CAP_S / 2  # not waited for
    assert records == []


def test_the_agent_records_when_it_began_stopping_its_workers(tmp_path, start_worker):
    """``stopping`` records AGENT_STOPPING (state STOPPING) from the agent, with its run id."""
    proc, records = start_worker(), []
    watch = _watch(tmp_path, proc, records)
    watch.stopping()
    (stop,) = [r for r in records if r.name == contract.AGENT_STOPPING]
    assert (stop.source.name, stop.metadata["state"]) == ("AGENT", "STOPPING")
    assert "run_id" in stop.metadata


def test_pulse_carries_the_ranks_progress(tmp_path):
    """Each beat rewrites the pulse with the rank's progress, which the agent reads back."""
    dumps = stacks.StackDumps(str(tmp_path), signal.SIGURG, 0.05).install()
    stacks.progress_from(lambda: stacks.Progress(7, 123.0, 0.5))
    try:
        deadline = time.monotonic() + 5.0
        while stacks.read_pulse(dumps.pulse) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stacks.read_pulse(dumps.pulse) == stacks.Progress(7, 123.0, 0.5)
    finally:
        stacks.progress_from(None)
        dumps.close()

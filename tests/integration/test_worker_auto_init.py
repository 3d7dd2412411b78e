"""Workers under ``tb-monitor run`` are monitored with no change to the training script: each
starts through ``tb_monitor.launcher.bootstrap``, which opens its monitor first.

Real torchrun jobs (one agent, gloo on CPU) run ``scripts/train_plain.py``, which never imports
tb_monitor, and ``scripts/train_own_init.py``, which calls ``tb_monitor.init(torch=True)`` itself.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import need
from ports import free_port
from torchrun_jobs import tb_monitor_run, timeline

from tb_monitor import contract
from tb_monitor.launcher import bootstrap, torchrun
from tb_monitor.logdir import readers

COLLECTIVES = contract.stat_tag(contract.RANK_COLLECTIVE, "count")
STEPS = contract.stat_tag(contract.RANK_STEP, "count")
STEP_TIME = contract.stat_tag(contract.RANK_STEP, "sum")

#: Held to no bound: in the timed tests' group only so that the two groups take about as long.
pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.beside_timed]

SCRIPTS = Path(__file__).parent / "scripts"
PLAIN = SCRIPTS / "train_plain.py"
OWN_INIT = SCRIPTS / "train_own_init.py"
TIMEOUT = 120
WORKER_ENV = {"TORCHELASTIC_RUN_ID": "job-9", "RANK": "0", "LOCAL_RANK": "0"}


@dataclass
class Job:
    """A finished one-agent job: its exit code, output and logdir read back."""

    run_id: str
    returncode: int
    output: str
    events: list[dict]
    scalars: list[readers.Scalar]
    logdir: Path

    def worker_states(self, rank: int) -> list[str]:
        """The states rank ``rank`` recorded about itself, in order."""
        run = f"{self.run_id}/rank-{rank}"
        return [e["state"] for e in self.events if e["run"] == run and e["kind"] == "worker"]

    def rank_runs(self) -> set[str]:
        return {e["run"] for e in self.events if "/rank-" in e["run"]}

    def total(self, rank: int, tag: str) -> float:
        run = f"{self.run_id}/rank-{rank}"
        return sum(s.value for s in self.scalars if s.run == run and s.tag == tag)


def run_job(tmp: Path, script: str, *args: str, nproc: int = 1, options=(), cwd=None) -> Job:
    """Run one agent of ``nproc`` workers to the end under ``tb-monitor run``."""
    need("torch")
    run_id = f"auto-{uuid.uuid4().hex[:8]}"
    logdir = tmp / "logs"
    command = tb_monitor_run(
        "--logdir",
        str(logdir),
        *options,
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        f"--rdzv-id={run_id}",
        "--max-restarts=0",
        script,
        *args,
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    env.pop(contract.LOGDIR_ENV, None)
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    return Job(
        run_id=run_id,
        returncode=done.returncode,
        output=done.stdout + done.stderr,
        events=timeline(logdir),
        scalars=list(readers.iter_scalars(logdir)) if logdir.exists() else [],
        logdir=logdir,
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> tuple[Job, Path]:
    """Two workers of the script that never imports tb_monitor; each reports what it saw."""
    tmp = tmp_path_factory.mktemp("plain")
    (tmp / "seen").mkdir()
    return run_job(tmp, str(PLAIN), "--report", str(tmp / "seen"), nproc=2), tmp / "seen"


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Job:
    """One worker of the plain script, raising a ValueError at step 1."""
    return run_job(tmp_path_factory.mktemp("failing"), str(PLAIN), "--fail-rank", "0")


@pytest.fixture(scope="module")
def own_init(tmp_path_factory) -> Job:
    """One worker of the script that opens its monitor itself."""
    return run_job(tmp_path_factory.mktemp("own-init"), str(OWN_INIT))


# -- a script that knows nothing of tb_monitor -----------------------------------------------


def test_each_worker_writes_its_own_run(plain):
    """An unmodified script's workers write ``<run id>/rank-0`` and ``rank-1``."""
    job, _ = plain
    assert job.returncode == 0, job.output
    assert job.rank_runs() == {f"{job.run_id}/rank-0", f"{job.run_id}/rank-1"}


def test_each_worker_records_its_start_and_end_once(plain):
    """Every rank records RUNNING, then SUCCEEDED, once each."""
    job, _ = plain
    for rank in (0, 1):
        assert job.worker_states(rank) == ["RUNNING", "SUCCEEDED"], job.output


def test_each_worker_records_its_rank_health(plain):
    """Every rank's run holds its step and collective timing: 3 optimizer steps (2 step times:
    the first step's boundary ends startup), 3 all_reduces."""
    job, _ = plain
    for rank in (0, 1):
        assert job.total(rank, STEPS) == 2
        assert job.total(rank, COLLECTIVES) == 3
        assert job.total(rank, STEP_TIME) > 0


def test_the_script_runs_as_main_with_its_arguments_and_directory(plain):
    """``__name__`` is ``__main__``, ``sys.argv`` the script and its arguments, ``__file__`` the
    script's absolute path, ``sys.path[0]`` its directory, as in ``python SCRIPT``."""
    _, seen = plain
    for rank in (0, 1):
        saw = json.loads((seen / f"rank-{rank}.json").read_text())
        assert saw["name"] == "__main__"
        assert saw["argv"] == [str(PLAIN), "--report", str(seen)]
        assert saw["file"] == str(PLAIN)
        assert saw["path0"] == str(SCRIPTS)


# -- a script that fails ------------------------------------------------------------------------


def test_a_failure_is_recorded_with_the_scripts_traceback(failing):
    """The worker's FAILED record has the exception and a traceback that starts at the script."""
    (failed,) = [e for e in failing.events if e["name"] == "tb_monitor.worker.status.FAILED"]
    assert failed["message"] == "ValueError: injected failure on rank 0"
    trace = failed["error_trace"]
    assert trace.endswith("ValueError: injected failure on rank 0\n")
    first_frame = trace.splitlines()[1]
    assert first_frame.startswith(f'  File "{PLAIN}"'), trace
    assert "bootstrap" not in trace and "runpy" not in trace


def test_a_failure_exits_as_torchrun_reports_it(failing):
    """The worker exits 1 (as its agent records), torchrun's summary names the script and its
    ``@record`` error file, and the launcher exits 1."""
    assert failing.returncode == 1
    (agent_side,) = [e for e in failing.events if e["name"] == "torchelastic.worker.status.FAILED"]
    assert agent_side["metadata"]["exit_code"] == 1
    assert "ValueError: injected failure on rank 0" in agent_side["error_trace"]
    assert f"{PLAIN} FAILED" in failing.output


# -- a script that calls tb_monitor.init() itself -----------------------------------------------


def test_a_script_calling_init_records_each_worker_event_once(own_init):
    """The script's own ``init(torch=True)`` adopts the worker's monitor: RUNNING and
    SUCCEEDED once, one writer (one event file) in the rank's run, and no warning."""
    assert own_init.returncode == 0, own_init.output
    assert own_init.worker_states(0) == ["RUNNING", "SUCCEEDED"]
    run_dir = own_init.logdir / own_init.run_id / "rank-0"
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert "tb_monitor.init:" not in own_init.output


def test_collectives_taken_before_init_are_timed_once(own_init):
    """``all_reduce`` imported before the script's ``init`` is timed, once a call."""
    assert own_init.total(0, COLLECTIVES) == 3


# -- other ways to start workers ----------------------------------------------------------------


def test_no_worker_init_leaves_the_workers_alone(tmp_path):
    """With ``--no-worker-init`` an unmodified script writes no rank run."""
    job = run_job(tmp_path, str(PLAIN), options=["--no-worker-init"])
    assert job.returncode == 0, job.output
    assert job.rank_runs() == set()
    assert any(e["kind"] == "agent" for e in job.events)  # the agent is captured as before


def test_a_module_runs_as_main_and_is_monitored(tmp_path):
    """``-m MODULE``: the module runs as ``__main__`` with ``python -m``'s ``sys.argv[0]`` and
    ``sys.path[0]`` (the working directory), and its worker writes its run."""
    seen = tmp_path / "seen"
    seen.mkdir()
    job = run_job(tmp_path, "train_plain", "--report", str(seen), options=["-m"], cwd=SCRIPTS)
    assert job.worker_states(0) == ["RUNNING", "SUCCEEDED"], job.output
    saw = json.loads((seen / "rank-0.json").read_text())
    assert saw["name"] == "__main__" and saw["argv"] == [str(PLAIN), "--report", str(seen)]
    assert saw["path0"] == str(SCRIPTS)


def test_run_path_entrypoint_opens_the_monitor_then_runs_the_script(tmp_path):
    """``bootstrap.run_script_path``, what ``--run-path`` workers call, records the worker and
    runs the script as torch's ``run_script_path`` does."""
    need("torch")
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:])\n")
    env = {**os.environ, **WORKER_ENV, contract.LOGDIR_ENV: str(tmp_path / "logs")}
    call = (
        f"from {torchrun.BOOTSTRAP} import run_script_path; run_script_path({str(script)!r}, 'a')"
    )
    done = subprocess.run(
        [sys.executable, "-c", call], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "__main__ ['a']\n", done.stderr
    states = [e["state"] for e in timeline(tmp_path / "logs") if e["kind"] == "worker"]
    assert states == ["RUNNING", "SUCCEEDED"]


# -- the worker command -------------------------------------------------------------------------


def _args(**flags: bool) -> argparse.Namespace:
    return argparse.Namespace(**{"no_python": False, "run_path": False, **flags})


def _torch_run_script_path(*args: str) -> None:
    """Stands for ``torch.distributed.run.run_script_path``."""


@pytest.mark.parametrize(
    ("cmd_args", "expected"),
    [
        (["-u", "train.py", "--lr=1"], ["-u", f"-m{torchrun.BOOTSTRAP}", "train.py", "--lr=1"]),
        (["-u", "-m", "pkg.train"], ["-u", f"-m{torchrun.BOOTSTRAP}", "-m", "pkg.train"]),
    ],
)
def test_a_python_worker_starts_through_the_bootstrap(cmd_args, expected):
    """A script or a module run by this interpreter gets the bootstrap in front of it."""
    command = torchrun.worker_command(_args(), sys.executable, cmd_args, _torch_run_script_path)
    assert command == (sys.executable, expected)


def test_run_path_calls_the_bootstraps_run_script_path():
    """``--run-path``'s function entrypoint becomes ``bootstrap.run_script_path``."""
    cmd, cmd_args = torchrun.worker_command(
        _args(run_path=True), _torch_run_script_path, ["train.py"], _torch_run_script_path
    )
    assert (cmd, cmd_args) == (bootstrap.run_script_path, ["train.py"])


def test_no_python_is_left_alone():
    """A ``--no-python`` entrypoint is not Python: its command is unchanged."""
    command = torchrun.worker_command(
        _args(no_python=True), "./train.sh", ["-u", "x"], _torch_run_script_path
    )
    assert command == ("./train.sh", ["-u", "x"])


def test_another_interpreter_is_left_alone_with_a_warning(caplog):
    """``$PYTHON_EXEC`` naming another interpreter (which may lack tb_monitor) is unchanged."""
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        command = torchrun.worker_command(
            _args(), "/opt/other/python", ["-u", "train.py"], _torch_run_script_path
        )
    assert command == ("/opt/other/python", ["-u", "train.py"])
    assert "not monitored unless the training script calls tb_monitor.init()" in caplog.text


# -- the bootstrap on its own -------------------------------------------------------------------


def _bootstrap(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-u", f"-m{torchrun.BOOTSTRAP}", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_a_failing_script_prints_and_exits_as_a_plain_run(tmp_path):
    """With the monitor open, a script's uncaught exception prints the same traceback and exits
    with the same code as ``python SCRIPT``."""
    need("torch")
    env = {**os.environ, contract.LOGDIR_ENV: str(tmp_path / "logs")}
    plain = subprocess.run(
        [sys.executable, "-u", str(SCRIPTS / "fail_plain.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    ours = _bootstrap(str(SCRIPTS / "fail_plain.py"), env=env, cwd=tmp_path)
    assert plain.returncode == 1
    assert (ours.returncode, ours.stderr) == (plain.returncode, plain.stderr)


@pytest.mark.parametrize("fault", ["logdir is a file", "no torch"])
def test_the_script_runs_when_the_monitor_cannot_open(tmp_path, fault):
    """A monitor that cannot be opened costs one warning; the script runs and exits 0."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, **WORKER_ENV, contract.LOGDIR_ENV: str(tmp_path / "logs")}
    if fault == "logdir is a file":
        env[contract.LOGDIR_ENV] = str(blocker)
    else:
        shadow = tmp_path / "shadow"
        shadow.mkdir()
        (shadow / "torch.py").write_text("raise ImportError('No module named torch')\n")
        env["PYTHONPATH"] = str(shadow)
    script = tmp_path / "hello.py"
    script.write_text("print('trained')\n")
    done = _bootstrap(str(script), env=env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "trained\n"
    assert done.stderr.count("tb_monitor: this worker is not monitored") == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_different_logdir_or_setting_is_ignored_with_one_warning(tmp_path):
    """The script's ``init`` with another logdir, ``flush_secs`` and ``rank_health=False`` still
    adopts the worker's monitor, warning once what it ignores; a later ``init`` warns as ever."""
    need("torch")
    env = {**os.environ, **WORKER_ENV, contract.LOGDIR_ENV: str(tmp_path / "logs")}
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "adopt_twice.py"), str(tmp_path / "other")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "adopted\n"
    assert done.stderr.count("ignoring logdir, flush_secs, rank_health=False") == 1, done.stderr
    assert done.stderr.count("closing the monitor already open") == 1
    running = [e for e in timeline(tmp_path / "logs") if e["state"] == "RUNNING"]
    assert Counter(e["run"] for e in running) == {"job-9/rank-0": 1}

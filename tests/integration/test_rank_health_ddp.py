"""Stragglers under DDP and FSDP with no change to the user's script: the wait for DDP's gradient
all-reduces (``tb_monitor.rank.grad_wait``) and FSDP's collectives tell the slow rank.

In-process: a one-rank gloo group, to show what the timing does to a job (nothing) and what it
records. Real jobs: FSDP (both versions) on one agent x two workers, under ``tb-monitor run``,
rank 1 slowed through ``SLOW_RANK`` (DDP's: the user-style script of ``test_users_jobs``).
"""

from __future__ import annotations

import logging
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import need
from ports import free_port
from torchrun_jobs import agent_env, stop_agents, tb_monitor_run

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.rank.grad_wait import GradWait
from tb_monitor.rank.health import RankHealth
from tb_monitor.testing import capture

#: Stragglers among ranks alike: judged by time, beside no other timed test.
pytestmark = pytest.mark.timed

SCRIPTS = Path(__file__).parent / "scripts"
SHARDED_SCRIPT = SCRIPTS / "train_sharded.py"
GRAD_WAITS = contract.stat_tag(contract.RANK_GRAD_WAIT, "count")
WINDOW_S = 1.0

# -- in-process: a one-rank gloo group ---------------------------------------------------------


@pytest.fixture(scope="module")
def _module_group(tmp_path_factory):
    """One one-rank gloo process group for this module's in-process tests, destroyed once at
    its end: gloo's teardown deadlocked in torch once in ~80 destroys here (its thread waiting
    for the GIL the destroying thread held), so the module pays for one destroy, not eight."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    store = dist.FileStore(str(tmp_path_factory.mktemp("group") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


@pytest.fixture
def group(torch, _module_group):
    """The module's one-rank gloo process group."""
    return _module_group


def _train(torch, model, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


def _ddp(torch):
    return torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))


def test_each_backward_of_a_ddp_built_after_install_records_its_gradient_wait(torch, group):
    """A DDP model the script builds itself: one gradient wait a backward, nothing to call."""
    with capture() as captured:
        recorder = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
        _train(torch, _ddp(torch), 5)
        recorder.close()
    assert {s.tag: s.value for s in captured.scalars()}[GRAD_WAITS] == 5


@pytest.mark.parametrize(
    "options",
    [{"find_unused_parameters": True}, {"static_graph": True}, {"gradient_as_bucket_view": True}],
    ids=lambda options: next(iter(options)),
)
def test_ddps_options_train_as_before_and_each_backward_is_timed(torch, group, options):
    """Unused-parameter search, a static graph, bucket views: one wait a backward, and the
    same parameters as an untimed twin trained alike."""
    waits: list[float] = []
    torch.manual_seed(0)
    twin = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **options)
    timer = GradWait(waits.append).install()
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **options)
        _train(torch, model, 4)
    finally:
        timer.close()
    _train(torch, twin, 4)
    assert len(waits) == 4
    for ours, theirs in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_a_users_comm_hook_is_still_theirs_and_runs(torch, group):
    """No comm hook of ours: the script registers its own (DDP allows one) and it runs."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def counting_hook(state, bucket):
        calls.append(1)
        return default_hooks.allreduce_hook(state, bucket)

    waits: list[float] = []
    timer = GradWait(waits.append).install()
    try:
        model = _ddp(torch)
        model.register_comm_hook(None, counting_hook)
        _train(torch, model, 3)
    finally:
        timer.close()
    assert (len(calls), len(waits)) == (3, 3)


def test_a_users_exception_in_backward_still_reaches_them(torch, group):
    """An error raised in the user's comm hook propagates out of ``backward`` unchanged."""

    def failing_hook(state, bucket):
        raise ValueError("the user's own error")

    timer = GradWait(lambda seconds: None).install()
    try:
        model = _ddp(torch)
        model.register_comm_hook(None, failing_hook)
        with pytest.raises(Exception, match="the user's own error"):
            model(torch.ones(2, 4)).sum().backward()
    finally:
        timer.close()


def test_a_fault_in_recording_is_a_warning_and_training_goes_on(torch, group, caplog):
    """Our recording raising: one warning, every backward completes, no more timing."""

    def broken(seconds: float) -> None:
        raise RuntimeError("sink gone")

    timer = GradWait(broken).install()
    try:
        model = _ddp(torch)
        with caplog.at_level(logging.WARNING, logger="tb_monitor"):
            _train(torch, model, 3)
        assert all(p.grad is None for p in model.parameters())  # zeroed after each step()
    finally:
        timer.close()
    assert [r.getMessage().count("no longer timed") for r in caplog.records] == [1]


def test_close_puts_ddp_back_as_it_was(torch, group):
    """After ``close``: DDP's constructor is torch's again, and no backward is timed."""
    from torch.nn.parallel import DistributedDataParallel

    original = DistributedDataParallel.__init__
    waits: list[float] = []
    timer = GradWait(waits.append).install()
    model = _ddp(torch)
    assert DistributedDataParallel.__init__ is not original
    timer.close()
    _train(torch, model, 2)
    assert DistributedDataParallel.__init__ is original and waits == []


# -- real jobs ---------------------------------------------------------------------------------


def _run(logdir: Path, command: list[str], agents: int, **env: str) -> None:
    need("torch")
    environment = agent_env(
        TB_MONITOR_RANK_WINDOW_S=str(WINDOW_S), TB_MONITOR_HEARTBEAT_S="1", **env
    )
    logs = [logdir.parent / f"agent-{n}.log" for n in range(agents)]
    outputs = [log.open("w") for log in logs]
    procs = [
        subprocess.Popen(
            command,
            env=environment,
            cwd=logdir.parent,  # the DDP script saves its snapshot in its working directory
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for output in outputs
    ]
    try:
        codes = [proc.wait(150) for proc in procs]
    finally:
        stop_agents(procs)
        for output in outputs:
            output.close()
    assert codes == [0] * agents, "\n".join(log.read_text()[-3000:] for log in logs)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["fsdp1", "fsdp2"])
def test_under_fsdp_the_slow_rank_is_the_only_straggler(tmp_path, version):
    """FullyShardedDataParallel and fully_shard, rank 1's layers 2x slower: rank 1 alone is
    flagged, from FSDP's own all-gathers and reduce-scatters."""
    logdir = tmp_path / "logs"
    command = tb_monitor_run(
        "--logdir",
        str(logdir),
        "--nnodes=1",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--max-restarts=0",
        str(SHARDED_SCRIPT),
        version,
        "120",
    )
    _run(logdir, command, agents=1, SLOW_RANK="1", SLOW_FACTOR="2")
    grid = RankGrid.from_logdir(logdir, window_s=WINDOW_S)
    assert [s.rank for s in grid.stragglers()] == [1]


class _StandInEvent:
    """A timing CUDA event as the device path uses it, on CPU: 3 ms after its start, and done
    once the stand-in GPU has passed it (``gpu_done``, up to a number of events recorded)."""

    recorded = 0
    gpu_done = 0
    synchronized = 0

    def record(self) -> None:
        _StandInEvent.recorded += 1
        self.number = _StandInEvent.recorded

    def query(self) -> bool:
        return self.number <= _StandInEvent.gpu_done

    def synchronize(self) -> None:
        _StandInEvent.synchronized += 1

    def elapsed_time(self, end: _StandInEvent) -> float:
        return 3.0


def _cuda_timer(waits: list[float], capturing: bool = False) -> GradWait:
    """A GradWait that takes every model for a CUDA one, with stand-in events."""
    _StandInEvent.recorded = _StandInEvent.gpu_done = _StandInEvent.synchronized = 0
    return GradWait(
        waits.append,
        on_cuda=lambda param: True,
        cuda_event=_StandInEvent,
        capturing=lambda: capturing,
    ).install()


def test_on_cuda_each_wait_is_read_once_the_gpu_is_past_its_events(torch, group):
    """A CUDA model's wait is the time between two events, read by a later backward once the
    GPU is done with them, oldest first; nothing waits for the GPU."""
    waits: list[float] = []
    timer = _cuda_timer(waits)
    try:
        model = _ddp(torch)
        _train(torch, model, 2)  # the stand-in GPU is behind: nothing to read yet
        assert waits == []
        _StandInEvent.gpu_done = 4  # past both backwards' events
        _train(torch, model, 1)
        assert waits == [0.003, 0.003]
    finally:
        timer.close()
    assert _StandInEvent.synchronized == 0


def test_on_cuda_the_events_are_reused(torch, group):
    """Read events are recorded again: two events in all while the GPU keeps up."""
    made = []

    class Event(_StandInEvent):
        def __init__(self) -> None:
            made.append(self)

        def query(self) -> bool:
            return True

    waits: list[float] = []
    _StandInEvent.recorded = 0
    timer = GradWait(
        waits.append, on_cuda=lambda param: True, cuda_event=Event, capturing=lambda: False
    ).install()
    try:
        _train(torch, _ddp(torch), 5)
    finally:
        timer.close()
    assert (len(waits), len(made)) == (5, 2)


def test_no_event_is_recorded_into_a_cuda_graph_capture(torch, group):
    """While the stream captures a graph, the device path records nothing."""
    waits: list[float] = []
    timer = _cuda_timer(waits, capturing=True)
    try:
        _train(torch, _ddp(torch), 2)
    finally:
        timer.close()
    assert (_StandInEvent.recorded, waits) == (0, [])

"""The stall rule on messy faults: what an agent sees explains a stall but never makes one, an
ended job has no live stall, a silent rank's time without a step counts from its last step, and
progress other than steps (batches, collectives, checkpoint saves) is no stall."""

from __future__ import annotations

import pytest

from tb_monitor import contract
from tb_monitor.analysis.agent_views import agent_views
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.health import report_of
from tb_monitor.analysis.rank_report import rank_health
from tb_monitor.testing import DEFAULT_START

T = DEFAULT_START + 1000.0  # when stalls are judged


def _beat(
    wall: float, since: float, inside: float = 0.0, steps: int = 100, **progress: float
) -> dict:
    """A rank's newest heartbeat values, logged at ``wall``; ``progress``: ``since_progress_s``
    and ``in_save_s`` where given (without: an older logdir's beat)."""
    return {
        "wall_time": wall,
        "steps": steps,
        "entered": 0,
        "left": 0,
        "in_collective_s": inside,
        "since_step_s": since,
        **progress,
    }


def _grid(beats: dict[int, dict]) -> RankGrid:
    """The grid of ``job/rank-N`` heartbeats (no windows: the 30-s floor is the rule)."""
    return RankGrid.from_series({}, {f"job/rank-{rank}": beat for rank, beat in beats.items()})


def _seen(rank: int, wall: float, seen: str = "stopped", state: str = "T") -> dict:
    """The agent's record that it sees ``rank``'s process ``seen`` (process state ``state``)."""
    row = dict.fromkeys(contract.FIELDS)
    row.update(
        run="job/agent-a-1",
        run_id="job",
        kind=contract.WORKER,
        name=contract.RANK_SEEN,
        state="SILENT",
        rank=rank,
        pid=40 + rank,
        hostname="a",
        wall_time=wall,
        message="",
        metadata={"seen": seen, "process_state": state},
    )
    return row


# -- what an agent sees explains a stall; it never makes one ---------------------------------


def test_a_rank_its_agent_sees_stopped_while_it_steps_is_not_stalled():
    """Rank 1, stopped from outside for most of every 100 ms, still steps: not stalled."""
    grid = _grid({rank: _beat(T, 0.1) for rank in range(4)})
    views = agent_views([_seen(1, T - 5.0)])
    assert rank_health(grid, now=T, views=views).stalls == ()


def test_a_rank_its_agent_sees_in_uninterruptible_sleep_while_it_steps_fails_no_report():
    """Rank 2 sampled in D while loading data, stepping all along: the report exits 0."""
    grid = _grid({rank: _beat(T, 0.2) for rank in range(4)})
    rows = [_seen(2, T - 5.0, "uninterruptible sleep", "D")]
    doc = report_of("logs", rows, grid, now=T)
    assert (doc.stalled, doc.exit_code, doc.to_json()["ranks"]["stalled"]) == (False, 0, False)


def test_a_silent_rank_is_not_stalled_before_the_floor():
    """Rank 3's heartbeats stopped 20 s ago while the others wait: silent, not yet stalled."""
    beats = {rank: _beat(T, 20.0, inside=19.9) for rank in range(3)} | {3: _beat(T - 20.0, 0.05)}
    assert _grid(beats).stalls(now=T) == []


def test_a_stopped_rank_is_named_past_the_floor_with_what_its_agent_sees():
    """Rank 3's heartbeats stopped 40 s ago and the others wait: it is stalled, silent and
    waited for, and its agent's view (stopped) comes with it as the explanation."""
    beats = {rank: _beat(T, 40.0, inside=39.9) for rank in range(3)} | {3: _beat(T - 40.0, 0.05)}
    ranks = rank_health(_grid(beats), now=T, views=agent_views([_seen(3, T - 30.0)]))
    stall = ranks.stalls[0]
    assert (stall.rank, stall.silent, stall.waited_for, ranks.waited_for) == (3, True, True, (3,))
    assert ranks.view_of(stall).seen == "stopped"


def test_ranks_whose_beats_come_late_on_a_busy_machine_are_not_waited_for():
    """Rank 3 stopped 60 s ago; ranks 1 and 2 wait too, their newest beats 20 s late (a loaded
    machine): only rank 3, which lags on and on, is silent and the rank waited for."""
    beats = {0: _beat(T, 60.0, inside=59.9)}
    beats |= {rank: _beat(T - 20.0, 40.0, inside=39.9) for rank in (1, 2)}
    beats |= {3: _beat(T - 60.0, 0.05)}
    ranks = rank_health(_grid(beats), now=T)
    assert ranks.waited_for == (3,)


# -- a silent rank's time without a step counts from its last step ---------------------------


def _stopped_18_8_s_ago() -> dict[int, dict]:
    """Rank 1 stopped 18.8 s before T; its newest beat in the logdir was logged 30 s before T (the
    window after it was still in its writer), when it was stepping; ranks 0, 2 and 3 have waited
    for it in a collective since it stopped."""
    waiting = {rank: _beat(T, 18.8, inside=18.7, steps=1112) for rank in (0, 2, 3)}
    return waiting | {1: _beat(T - 30.0, 0.05, steps=1000)}


def test_a_silent_rank_counts_from_its_last_step_not_from_its_last_logged_beat():
    """Rank 1 has made no step for as long as the ranks waiting for it: 18.8 s, not 30 s."""
    stalls = _grid(_stopped_18_8_s_ago()).stalls(now=T, floor_s=10.0)
    assert [s.since_step_s for s in stalls if s.rank == 1] == [pytest.approx(18.8)]


def test_a_rank_stopped_18_8_s_ago_is_not_yet_stalled():
    """18.8 s after the stop no rank has passed the 30-s floor: nothing is stalled."""
    assert _grid(_stopped_18_8_s_ago()).stalls(now=T) == []


# -- an ended job has no live stall; a rank whose attempt ended is not silent ----------------

AGENTS = {"job/agent-a-1": (0, 1), "job/agent-b-2": (2, 3)}  # two nodes, two ranks each
START, FAILED_AT = T - 100.0, T - 30.0


def _rec(t: float, run: str, kind: str, state: str, name: str | None = None, **fields) -> dict:
    row = dict.fromkeys(contract.FIELDS)
    row.update(run=run, run_id="job", kind=kind, wall_time=t, state=state, metadata={})
    row.update(name=name or f"torchelastic.worker.status.{state}", hostname=run.split("-")[1])
    row.update(fields)
    return row


def _joined(t: float, agent: str, attempt: int) -> dict:
    message = f"The node '{agent.split('-')[1]}' has joined round {attempt} of 'job' as rank 0"
    return _rec(t, agent, contract.RENDEZVOUS, "RUNNING", "h.next", message=message)


def _worker(t: float, rank: int, state: str, attempt: int = 0, code: int | None = None) -> dict:
    """Its agent's record of ``rank``'s worker: START, or FAILED with its exit ``code``."""
    agent = next(agent for agent, ranks in AGENTS.items() if rank in ranks)
    metadata = {"agent_restarts": attempt} | ({} if code is None else {"exit_code": code})
    return _rec(t, agent, contract.WORKER, state, rank=rank, source="WORKER", metadata=metadata)


def _rank_2_raised(ended: bool) -> list[dict]:
    """Rank 2 raised at FAILED_AT; its sibling rank 3 ignores SIGTERM until its agent SIGKILLs
    it 30 s later. With ``ended``, that happened, ranks 0 and 1 were stopped, and both agents
    recorded FAILED: the job is over."""
    rows = [*(_joined(START, agent, 0) for agent in AGENTS)]
    rows += [*(_worker(START + 1, rank, "START") for rank in range(4))]
    rows.append(_worker(FAILED_AT, 2, "FAILED", code=1))
    if ended:
        rows.append(_worker(T - 0.5, 3, "FAILED", code=-9))
        rows += [_worker(T - 0.5, rank, "FAILED", code=-15) for rank in (0, 1)]
        rows += [_rec(T, agent, contract.AGENT, "FAILED", source="AGENT") for agent in AGENTS]
    return rows


def _waiting_for_rank_2(until: float) -> RankGrid:
    """Rank 2's beats stop when it raises; the others wait for it in a collective until
    ``until``, their last step 5 s before it raised."""
    since = until - FAILED_AT + 5.0
    waiting = {rank: _beat(until, since, inside=since - 0.1) for rank in (0, 1, 3)}
    return _grid(waiting | {2: _beat(FAILED_AT, 0.05)})


def test_an_ended_job_lists_no_stalled_rank():
    """The job failed and ended: no stall is listed, and the exit code is the failure's."""
    doc = report_of("logs", _rank_2_raised(ended=True), _waiting_for_rank_2(T - 0.5))
    assert (doc.status, doc.attempts[-1].root_cause.rank, doc.jobs[0].finished) == (
        "failed",
        2,
        True,
    )
    assert (doc.ranks.stalls, doc.to_json()["ranks"]["stalls"], doc.exit_code) == ((), [], 1)


def test_a_failed_rank_is_not_silent_while_its_attempt_is_torn_down():
    """Rank 2 raised and rank 3 still ignores SIGTERM: the attempt has failed, so rank 2 is not
    called silent, nor is any rank of it stalled."""
    doc = report_of("logs", _rank_2_raised(ended=False), _waiting_for_rank_2(T), now=T)
    assert (doc.status, doc.jobs[0].finished, doc.ranks.stalls) == ("failed", False, ())


def test_a_rank_of_an_attempt_before_a_restart_is_not_stalled():
    """Rank 3 failed, node b left, and attempt 1 runs on ranks 0 and 1: ranks 2 and 3, whose
    beats stopped with attempt 0, are not stalled; the report is healthy."""
    rows = [*(_joined(START, agent, 0) for agent in AGENTS)]
    rows += [_worker(START + 1, rank, "START") for rank in range(4)]
    rows += [_worker(START + 50, 3, "FAILED", code=1)]
    rows += [_worker(START + 51, rank, "FAILED", code=-15) for rank in range(3)]
    rows += [_joined(START + 79, "job/agent-a-1", 1)]
    rows += [_worker(START + 80, rank, "START", attempt=1) for rank in (0, 1)]
    beats = {rank: _beat(T, 0.1) for rank in (0, 1)} | {r: _beat(START + 50, 0.1) for r in (2, 3)}
    doc = report_of("logs", rows, _grid(beats), now=T)
    assert (doc.status, doc.ranks.stalls, doc.exit_code) == ("running", (), 0)


# -- a job its agent is stopping has no live stall ---------------------------------------------


def _stopping(t: float, agent: str) -> dict:
    """The agent's record that it began stopping its workers (a signal, a failure, a restart)."""
    return _rec(t, agent, contract.AGENT, "STOPPING", contract.AGENT_STOPPING, source="AGENT")


def _stuck_in_their_sigterm_handlers() -> tuple[list[dict], RankGrid]:
    """Both agents got SIGTERM at T - 50 and began stopping; the ranks hang in their SIGTERM
    handlers since (no step for 40 s and more, past the floor): no verdict recorded yet."""
    rows = [*(_joined(START, agent, 0) for agent in AGENTS)]
    rows += [_worker(START + 1, rank, "START") for rank in range(4)]
    rows += [_stopping(T - 50.0, agent) for agent in AGENTS]
    return rows, _grid({rank: _beat(T, 40.0 + rank) for rank in range(4)})


def test_ranks_hung_in_a_stop_the_agent_began_are_not_stalled():
    """Ranks that stop stepping once their agent began stopping them (a preemption whose
    handler hangs) are the stop's doing: no rank is stalled or waited for, exit code 0."""
    rows, grid = _stuck_in_their_sigterm_handlers()
    doc = report_of("logs", rows, grid, now=T)
    assert (doc.ranks.stalls, doc.ranks.waited_for, doc.exit_code) == ((), (), 0)


def test_a_stop_before_the_running_attempt_leaves_its_stalls_alone():
    """An agent's stop of an earlier attempt (before a restart) does not hide the new
    attempt's stall."""
    rows, grid = _stuck_in_their_sigterm_handlers()
    rows = [r for r in rows if r["name"] != contract.AGENT_STOPPING]
    rows += [_stopping(START - 5.0, agent) for agent in AGENTS]
    doc = report_of("logs", rows, grid, now=T)
    assert doc.ranks.stalls != ()


# -- progress, not only steps: a hang named past the 10-s floor, healthy pauses not stalled ---


def _hung_12_s_ago(**rank_3: float) -> dict[int, dict]:
    """Rank 3 hung 12 s before T (its beats go on, it fetches nothing); ranks 0-2 have waited
    in a collective since, without progress; ``rank_3``: its own progress fields."""
    waiting = {
        rank: _beat(T, 12.0, inside=11.9, since_progress_s=12.0, in_save_s=0.0) for rank in range(3)
    }
    return waiting | {3: _beat(T, 12.0, **{"since_progress_s": 12.0, "in_save_s": 0.0, **rank_3})}


def test_a_hang_is_named_past_the_progress_floor():
    """12 s without a step or progress, past the 10-s floor: rank 3 is stalled, waited for."""
    stalls = _grid(_hung_12_s_ago()).stalls(now=T)
    assert [s.rank for s in stalls if s.waited_for] == [3]


def test_a_hang_in_an_older_logdir_waits_for_the_step_floor():
    """Beats without progress fields keep the rule of steps alone: 12 s is short of 30 s."""
    beats = {rank: _beat(T, 12.0, inside=11.9) for rank in range(3)} | {3: _beat(T, 12.0)}
    assert _grid(beats).stalls(now=T) == []


def test_an_evaluation_loop_fetching_batches_is_not_stalled():
    """A minute without an optimizer step, a batch fetched 0.1 s ago on every rank: no stall."""
    beats = {rank: _beat(T, 60.0, since_progress_s=0.1, in_save_s=0.0) for rank in range(4)}
    assert _grid(beats).stalls(now=T) == []


def test_ranks_waiting_for_a_rank_saving_a_checkpoint_are_not_stalled():
    """Rank 3 has saved for 20 s, the others wait for it in a collective: nothing is stalled."""
    beats = _hung_12_s_ago(since_progress_s=0.0, in_save_s=20.0)
    assert _grid(beats).stalls(now=T) == []


def test_a_rank_whose_beats_stopped_inside_a_save_is_judged_as_any_other():
    """Rank 3's beats stopped 40 s ago inside a save while the others wait: it is stalled."""
    waiting = {
        rank: _beat(T, 40.0, inside=39.9, since_progress_s=40.0, in_save_s=0.0) for rank in range(3)
    }
    beats = waiting | {3: _beat(T - 40.0, 0.05, since_progress_s=0.0, in_save_s=5.0)}
    assert [s.rank for s in _grid(beats).stalls(now=T) if s.waited_for] == [3]


def test_a_slow_first_step_waits_for_the_step_floor():
    """No step finished yet (one boundary): 20 s without progress is a slow start, not a hang."""
    beats = {
        rank: _beat(T, 20.0, steps=1, since_progress_s=20.0, in_save_s=0.0) for rank in range(4)
    }
    assert _grid(beats).stalls(now=T) == []


def test_ranks_whose_beat_predates_the_end_of_a_save_are_not_stalled():
    """Rank 3's save ended a beat ago (it progressed 0.5 s ago); the others' newest beats, from
    before it ended, say 20 s without progress: they waited for the save, nothing is stalled."""
    beats = _hung_12_s_ago(since_progress_s=0.5)
    beats.update({rank: {**beats[rank], "since_progress_s": 20.0} for rank in range(3)})
    assert _grid(beats).stalls(now=T) == []


def test_a_rank_stopped_before_its_beats_showed_a_step_is_named_past_the_progress_floor():
    """Rank 3's newest beat, 20 s old, predates the job's first steps (steps 0); the others
    stepped, then waited 12 s without progress: it is named at the 10-s floor, not the 30-s one
    of a slow first step (it took the steps the others took)."""
    beats = _hung_12_s_ago()
    beats[3] = _beat(T - 20.0, 0.5, steps=0, since_progress_s=0.5, in_save_s=0.0)
    stalls = _grid(beats).stalls(now=T)
    assert [(s.rank, s.silent) for s in stalls if s.waited_for] == [(3, True)]


def test_a_late_rank_inside_the_collective_is_not_waited_for_beside_a_stopped_one():
    """Rank 1 stopped 12 s ago, a few steps into training, before the collective the others are
    in; rank 2's beats come 9.5 s late on a loaded machine, its newest inside that collective:
    both lag alike, but only rank 1, behind in the collectives' sequence, is waited for (a
    fresh-clone CI's case)."""
    beats = {rank: {**_beat(T, 12.0, inside=11.9, steps=3), "entered": 5} for rank in (0, 3)}
    beats[2] = {**_beat(T - 9.5, 2.5, inside=2.4, steps=3), "entered": 5}
    beats[1] = {**_beat(T - 12.5, 0.3, steps=3), "entered": 4}
    for beat in beats.values():
        beat["since_progress_s"] = beat["in_collective_s"] or beat["since_step_s"]
    grid = RankGrid.from_series({}, {f"job/rank-{r}": b for r, b in beats.items()}, window_s=1.0)
    assert [s.rank for s in grid.stalls(now=T) if s.waited_for] == [1]


def test_of_two_silent_ranks_the_one_its_agent_sees_stopped_is_waited_for():
    """DDP's gradient all-reduce runs from C++, so no beat shows who is inside it: of rank 1,
    stopped, and rank 2, whose beats come as late, the one its agent sees stopped is waited for
    (the other's agent hears its pulse)."""
    beats = {rank: _beat(T, 12.0, steps=3) for rank in (0, 3)}
    beats |= {2: _beat(T - 9.5, 2.5, steps=3), 1: _beat(T - 12.5, 0.3, steps=3)}
    for beat in beats.values():
        beat["since_progress_s"] = beat["since_step_s"]
    grid = RankGrid.from_series({}, {f"job/rank-{r}": b for r, b in beats.items()}, window_s=1.0)
    stalls = grid.stalls(now=T, seen_silent={"job/rank-1": T - 11.0})
    assert [s.rank for s in stalls if s.waited_for] == [1]


def test_a_rank_behind_in_the_flight_recorder_outranks_ranks_whose_beats_lag():
    """DDP: rank 3 sleeps before its forward, its beats going on; ranks 0-2, ahead in the Flight
    Recorder inside the gradient all-reduce, have beats 5 s late on a loaded machine: rank 3 is
    waited for, not them (a fresh-clone CI's test_rank_health)."""
    beats = {rank: {**_beat(T - 5.0, 7.0, steps=5), "fr_seq": 10} for rank in range(3)}
    beats[3] = {**_beat(T, 12.0, steps=5), "fr_seq": 9}
    for beat in beats.values():
        beat["since_progress_s"] = beat["since_step_s"]
    grid = RankGrid.from_series({}, {f"job/rank-{r}": b for r, b in beats.items()}, window_s=1.0)
    assert [s.rank for s in grid.stalls(now=T) if s.waited_for] == [3]


def _waited_for_in_a_ddp_read(rank_2_steps: int) -> list[int]:
    """Ranks 0 and 3 one collective behind rank 2 in the Flight Recorder, all three 12 s
    without a step, rank 2 with ``rank_2_steps`` (the others 40); rank 1 silent 12.5 s: the
    ranks waited for."""
    beats = {rank: {**_beat(T, 12.0, steps=40), "fr_seq": 44} for rank in (0, 3)}
    beats[2] = {**_beat(T, 12.0, steps=rank_2_steps), "fr_seq": 45}
    beats[1] = _beat(T - 12.5, 0.3, steps=40)
    for beat in beats.values():
        beat["since_progress_s"] = beat["since_step_s"]
    grid = RankGrid.from_series({}, {f"job/rank-{r}": b for r, b in beats.items()}, window_s=1.0)
    return [s.rank for s in grid.stalls(now=T) if s.waited_for]


def test_a_rank_behind_others_of_as_many_steps_outranks_a_silent_one():
    """The same read but rank 2 took no step more: ranks 0 and 3 never entered the collective
    it is in, and are waited for before rank 1, whose beats may merely come late."""
    assert _waited_for_in_a_ddp_read(rank_2_steps=40) == [0, 3]


def test_a_rank_a_step_behind_in_the_sequence_outranks_a_silent_one():
    """Python all-reduces after each optimizer step: rank 3 hangs before step 5, a step and a
    collective behind ranks 1 and 2 inside the next all-reduce, its beats going on; rank 0's
    beats come late: rank 3 is waited for (a fresh-clone CI's test_rank_health, when a rule
    counted behind only against ranks of no more steps)."""
    beats = {rank: {**_beat(T, 12.0, inside=11.9, steps=6), "entered": 6} for rank in (1, 2)}
    beats[0] = {**_beat(T - 9.5, 2.5, inside=2.4, steps=6), "entered": 6}
    beats[3] = {**_beat(T, 12.1, steps=5), "entered": 5}
    for beat in beats.values():
        beat["since_progress_s"] = beat["in_collective_s"] or beat["since_step_s"]
    grid = RankGrid.from_series({}, {f"job/rank-{r}": b for r, b in beats.items()}, window_s=1.0)
    assert [s.rank for s in grid.stalls(now=T) if s.waited_for] == [3]

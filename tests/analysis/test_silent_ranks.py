"""The stall rule for a silent rank, and the agent's views read back from timeline records."""

from __future__ import annotations

from tb_monitor import contract
from tb_monitor.analysis.agent_views import agent_views, silent_runs
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.scoring import stalled_ranks

T = 1_800_000_000.0


def _beat(wall: float, since_step: float) -> dict:
    return {"wall_time": wall, "since_step_s": since_step, "entered": 0, "left": 0}


def test_a_rank_whose_beats_stopped_while_others_wait_is_silent_and_waited_for():
    """Rank 3's beats stopped 40 s ago; the others beat on without a step: past the floor it is
    stalled, silent, and the one waited for."""
    beats = {r: _beat(T, 40.0) for r in range(3)} | {3: _beat(T - 40.0, 0.1)}
    rows = stalled_ranks(beats, {}, floor_s=30.0, silent_after_s=3.5)
    assert (rows[0]["rank"], rows[0]["silent"]) == (3, True)
    assert [r["rank"] for r in rows if r["waited_for"]] == [3]


def test_a_rank_quiet_while_others_step_is_not_stalled():
    """Rank 3's beats stopped but the others still step (it ended, or the job went on without
    its node): not silent, not stalled."""
    beats = {r: _beat(T, 0.05) for r in range(3)} | {3: _beat(T - 10.0, 0.1)}
    assert stalled_ranks(beats, {}, floor_s=30.0, silent_after_s=3.5) == []


def test_a_rank_whose_beats_stopped_long_ago_is_stalled_though_no_one_waits():
    """Rank 3's beats stopped 40 s ago while the others step on: its time without a step grows
    from its last beat, so it is stalled, but neither silent nor waited for."""
    beats = {r: _beat(T, 0.05) for r in range(3)} | {3: _beat(T - 40.0, 0.1)}
    rows = stalled_ranks(beats, {}, floor_s=30.0, silent_after_s=3.5)
    assert [(r["rank"], r["silent"], r["waited_for"]) for r in rows] == [(3, False, False)]


def test_no_rank_is_silent_when_all_beat():
    """Ranks beating together are never silent, whatever their lag within the threshold."""
    beats = {r: _beat(T - (r % 2), 0.05) for r in range(4)}
    assert stalled_ranks(beats, {}, floor_s=30.0, silent_after_s=3.5) == []


def _row(name: str, state: str, wall: float, **meta) -> dict:
    return {
        "run": "job/agent-a-1",
        "kind": contract.WORKER,
        "name": name,
        "state": state,
        "rank": 3,
        "pid": 42,
        "hostname": "a",
        "wall_time": wall,
        "message": meta.pop("message", ""),
        "metadata": meta,
    }


def test_agent_views_keep_the_newest_view_and_the_stacks_since():
    """The newest SILENT view wins; stacks from before it are dropped, those after it kept."""
    rows = [
        _row(contract.RANK_STACKS, "STACKS", T, stacks="old"),
        _row(contract.RANK_SEEN, "SILENT", T + 1, seen="stopped", process_state="T"),
    ]
    view = agent_views(rows)[("job", 3)]
    assert (view.seen, view.stacks, view.process_state) == ("stopped", None, "T")
    assert view.stacks_note.startswith("stopped: no stacks")
    rows.append(
        _row(contract.RANK_STACKS, "STACKS", T + 2, stacks="new", message="x, dumped on request")
    )
    view = agent_views(rows)[("job", 3)]
    assert (view.stacks, view.stacks_reason, view.stacks_note) == ("new", "dumped on request", None)


def test_a_rank_responding_again_is_not_silent():
    """RESPONDING ends the silent view: the rank's run is not among the silent ones."""
    rows = [
        _row(contract.RANK_SEEN, "SILENT", T, seen="alive but silent"),
        _row(contract.RANK_SEEN, "RESPONDING", T + 1, seen="responding"),
    ]
    views = agent_views(rows)
    assert views[("job", 3)].seen is None
    assert silent_runs(["job/rank-3"], views) == {}
    assert silent_runs(["job/rank-3"], agent_views(rows[:1])) == {"job/rank-3": T}


def test_a_rank_stopped_before_its_first_heartbeat_is_waited_for():
    """Rank 3 recorded nothing; its agent saw it stopped 38 s ago while ranks 0-2 wait: it is
    named, without a step since then."""
    grid = RankGrid.from_series({}, {f"job/rank-{r}": _beat(T + 40.0, 40.0) for r in range(3)})
    views = agent_views([_row(contract.RANK_SEEN, "SILENT", T + 2.0, seen="stopped")])
    stall = grid.stalls(seen_silent=silent_runs(grid.runs, views))[0]
    assert (stall.rank, stall.run, stall.row) == (3, "job/rank-3", -1)
    assert (stall.silent, stall.waited_for, stall.since_step_s) == (True, True, 38.0)


def test_a_silent_rank_of_another_job_is_not_this_grid_s():
    """A rank seen silent in a job the grid holds no rank of is no stall of the grid."""
    grid = RankGrid.from_series({}, {f"other/rank-{r}": _beat(T + 20.0, 20.0) for r in range(3)})
    views = agent_views([_row(contract.RANK_SEEN, "SILENT", T + 2.0, seen="stopped")])
    assert silent_runs(grid.runs, views) == {}

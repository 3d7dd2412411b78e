"""A node cut off from the rendezvous store: its agent's keep-alives stop while another agent's
go on, and once every rank stalls inside the same collective, its ranks are the ones waited for."""

from __future__ import annotations

from tb_monitor import contract
from tb_monitor.analysis.grid import RankGrid
from tb_monitor.analysis.health import report_of
from tb_monitor.analysis.scoring import Cut
from tb_monitor.analysis.store_contact import RETRANSMIT_MAX_S, cut_off_ranks
from tb_monitor.testing import DEFAULT_START

T = DEFAULT_START + 1000.0
KEEP_ALIVE = "dynamic_rendezvous.py:DynamicRendezvousHandler._keep_alive"


def _row(agent: str, wall: float, **fields) -> dict:
    row = dict.fromkeys(contract.FIELDS)
    row.update(run=f"job/agent-{agent}", run_id="job", wall_time=wall, metadata={}, **fields)
    return row


def _keep_alive(agent: str, wall: float) -> dict:
    return _row(
        agent, wall, kind=contract.RENDEZVOUS, source="RENDEZVOUS", state="RUNNING", name=KEEP_ALIVE
    )


def _start(agent: str, rank: int) -> dict:
    return _row(
        agent,
        T - 100.0,
        kind=contract.WORKER,
        source="WORKER",
        state="START",
        name="torchelastic.worker.status.START",
        rank=rank,
    )


def _job(a_last: float, b_last: float) -> list[dict]:
    """Agent a (ranks 0, 1) and agent b (ranks 2, 3), keep-alives every 5 s up to ``*_last``."""
    rows = [_start("a-1", 0), _start("a-1", 1), _start("b-2", 2), _start("b-2", 3)]
    for agent, last in (("a-1", a_last), ("b-2", b_last)):
        rows += [_keep_alive(agent, last - 5.0 * i) for i in range(10)]
    return rows


def test_a_node_whose_keep_alives_stopped_while_anothers_went_on_is_cut_off():
    """Agent b's last keep-alive 30 s before agent a's newest: ranks 2, 3 cut off since then."""
    assert cut_off_ranks(_job(T, T - 30.0)) == {
        ("job", 2): Cut(T - 30.0),
        ("job", 3): Cut(T - 30.0),
    }


def test_keep_alives_one_interval_apart_are_no_cut():
    """Agent b 5 s behind agent a (one interval, as a live node between two keep-alives): no
    cut."""
    assert cut_off_ranks(_job(T, T - 5.0)) == {}


def test_keep_alives_two_intervals_apart_are_a_cut():
    """Agent b 10 s behind agent a (two intervals, before torchelastic's three): cut off."""
    assert set(cut_off_ranks(_job(T, T - 10.0))) == {("job", 2), ("job", 3)}


def test_an_agent_that_recorded_its_verdict_is_not_cut_off():
    """Agent b ended (its verdict): its keep-alives stopped because it did, not a partition."""
    verdict = _row(
        "b-2",
        T - 29.0,
        kind=contract.WORKER,
        source="AGENT",
        state="SUCCEEDED",
        name="torchelastic.worker.status.SUCCEEDED",
    )
    assert cut_off_ranks([*_job(T, T - 30.0), verdict]) == {}


def _beat(since: float, entered: int = 7) -> dict:
    return {
        "wall_time": T,
        "steps": 100,
        "entered": entered,
        "left": entered - 1,
        "in_collective_s": since,
        "since_step_s": since,
        "since_progress_s": since,
        "in_save_s": 0.0,
    }


def test_ranks_of_a_cut_off_node_are_waited_for_when_all_wait_in_one_collective():
    """Every rank 40 s inside collective 7: ranks 2, 3, cut off, are the ones waited for."""
    grid = RankGrid.from_series({}, {f"job/rank-{r}": _beat(40.0) for r in range(4)})
    stalls = grid.stalls(now=T, cut_off={("job", 2): Cut(T - 45.0), ("job", 3): Cut(T - 45.0)})
    assert sorted((s.rank, s.cut_off) for s in stalls if s.waited_for) == [(2, True), (3, True)]


def test_a_cut_off_nodes_ranks_are_waited_for_whoever_reads_outside_the_collective():
    """Rank 0 reads outside collective 7 (FSDP2's collectives go around our wrapper): still
    ranks 2, 3, cut off, are the ones waited for (the campaign's partition on FSDP2, seed 61)."""
    beats = {f"job/rank-{r}": _beat(40.0) for r in range(4)}
    beats["job/rank-0"] = {**_beat(40.0, 6), "in_collective_s": 0.0}
    cut = {("job", 2): Cut(T - 45.0), ("job", 3): Cut(T - 45.0)}
    stalls = RankGrid.from_series({}, beats).stalls(now=T, cut_off=cut)
    assert sorted((s.rank, s.cut_off) for s in stalls if s.waited_for) == [(2, True), (3, True)]


def test_a_cut_off_nodes_ranks_are_waited_for_as_soon_as_the_job_stalls():
    """Twelve seconds into the stall, agent b 8 s behind: ranks 2, 3 are named, not rank 0,
    which reads outside the collective (the campaign's partition on FSDP2, seed 63, named rank
    1 so before the cut was known)."""
    beats = {f"job/rank-{r}": _beat(12.0) for r in range(4)}
    beats["job/rank-0"] = {**_beat(12.0, 6), "in_collective_s": 0.0}
    cut = cut_off_ranks(_job(T, T - 8.0))
    stalls = RankGrid.from_series({}, beats).stalls(now=T, floor_s=10.0, cut_off=cut)
    assert sorted(s.rank for s in stalls if s.waited_for) == [2, 3]


def test_a_cut_off_nodes_ranks_are_waited_for_over_ranks_whose_beats_come_late():
    """Ranks 0, 1 (the store's side) beat 5 s late, their agent hears their pulse: ranks 2, 3,
    cut off, are the ones waited for (a read of the campaign's partition on DDP named 0, 1)."""
    beats = {f"job/rank-{r}": _beat(14.0) for r in range(4)}
    for r in (0, 1):
        beats[f"job/rank-{r}"] = {**_beat(9.0), "wall_time": T - 5.0}
    cut = cut_off_ranks(_job(T, T - 10.0))
    stalls = RankGrid.from_series({}, beats, window_s=1.0).stalls(now=T, floor_s=10.0, cut_off=cut)
    assert [s.rank for s in stalls if s.silent] == [0, 1]
    assert sorted(s.rank for s in stalls if s.waited_for) == [2, 3]


def test_a_rank_its_agent_sees_stopped_outranks_a_cut_off_node():
    """Rank 0 stopped (its agent sees it so) while agent b's keep-alives are late: rank 0 is
    the one waited for."""
    beats = {f"job/rank-{r}": _beat(14.0) for r in range(4)}
    beats["job/rank-0"] = {**_beat(9.0), "wall_time": T - 5.0}
    cut = cut_off_ranks(_job(T, T - 10.0))
    grid = RankGrid.from_series({}, beats, window_s=1.0)
    stalls = grid.stalls(now=T, floor_s=10.0, cut_off=cut, seen_silent={"job/rank-0": T - 4.0})
    assert [s.rank for s in stalls if s.waited_for] == [0]


def test_a_keep_alive_overdue_while_anothers_come_is_a_cut_not_yet_confirmed():
    """By the ranks' newest beat agent b's keep-alive is 9 s overdue while agent a's is 3 s
    old: ranks 2, 3 are cut off, not yet confirmed (agent a's next keep-alive will say)."""
    unconfirmed = Cut(T - 9.0, confirmed=False)
    assert cut_off_ranks(_job(T - 3.0, T - 9.0), now=T) == {
        ("job", 2): unconfirmed,
        ("job", 3): unconfirmed,
    }


def test_without_a_time_to_judge_by_no_keep_alive_is_overdue():
    """Judged by the newest keep-alive (no ``now``), agent b 6 s behind agent a: no cut."""
    assert cut_off_ranks(_job(T - 3.0, T - 9.0)) == {}


def test_no_rank_is_named_while_the_only_cut_is_unconfirmed():
    """Every rank 12 s stalled, rank 1 a collective behind in the Flight Recorder (the cut came
    mid-all_reduce), agent b's keep-alive overdue: no rank is named before the cut is confirmed
    (the campaign's partition on DDP named rank 1, of the store's side)."""
    beats = {f"job/rank-{r}": {**_beat(12.0), "fr_seq": 72} for r in range(4)}
    beats["job/rank-1"]["fr_seq"] = 71
    cut = cut_off_ranks(_job(T - 3.0, T - 9.0), now=T)
    stalls = RankGrid.from_series({}, beats).stalls(now=T, floor_s=10.0, cut_off=cut)
    assert len(stalls) == 4 and not any(s.waited_for for s in stalls)


def _healed_job() -> list[dict]:
    """Agent a's keep-alives every 5 s up to T; agent b's up to T - 20, none for 15 s, then
    again at T - 5 (the cut healed)."""
    return [*_job(T, T - 20.0), _keep_alive("b-2", T - 5.0)]


def test_a_cut_that_healed_moments_ago_is_kept_unconfirmed():
    """Agent b went 15 s without a keep-alive while agent a's came, and healed 5 s ago: a cut
    from T - 20 to T - 5 that names no rank yet (its ranks' beats still to show them stepping)."""
    cut = Cut(T - 20.0, T - 5.0, confirmed=False)
    assert cut_off_ranks(_healed_job(), now=T) == {("job", 2): cut, ("job", 3): cut}


def test_no_rank_is_named_for_a_stall_that_began_before_the_cut_healed():
    """Ranks stalled 19 s, since before the cut healed 5 s ago, rank 1 a collective behind: no
    rank is named (the campaign's partition on DDP named rank 1, of the store's side, so)."""
    beats = {f"job/rank-{r}": {**_beat(19.0), "fr_seq": 72} for r in range(4)}
    beats["job/rank-1"]["fr_seq"] = 71
    cut = cut_off_ranks(_healed_job(), now=T)
    stalls = RankGrid.from_series({}, beats).stalls(now=T, floor_s=10.0, cut_off=cut)
    assert len(stalls) == 4 and not any(s.waited_for for s in stalls)


def test_a_stall_that_began_after_the_cut_healed_is_not_the_cuts():
    """Ranks stalled 4 s, since after the cut healed 5 s ago, rank 1 a collective behind: rank
    1 is the one waited for, by the Flight Recorder."""
    beats = {f"job/rank-{r}": {**_beat(4.0), "fr_seq": 72} for r in range(4)}
    beats["job/rank-1"]["fr_seq"] = 71
    cut = cut_off_ranks(_healed_job(), now=T)
    stalls = RankGrid.from_series({}, beats).stalls(now=T, floor_s=3.0, cut_off=cut)
    assert [s.rank for s in stalls if s.waited_for] == [1]


def test_a_gap_in_every_agents_keep_alives_is_no_cut():
    """Both agents went 12 s without a keep-alive (a restart's rendezvous stops them on every
    node, and they start again an interval after it) and go on since: no cut."""
    rows = _job(T - 20.0, T - 20.0)
    rows += [_keep_alive(agent, at) for agent in ("a-1", "b-2") for at in (T - 8.0, T - 3.0)]
    assert cut_off_ranks(rows, now=T) == {}


def _healed_and_stalled_on() -> list[dict]:
    """``_healed_job``, both agents' keep-alives going on to T + 5 after the heal at T - 5."""
    return [*_healed_job(), *(_keep_alive(a, at) for a in ("a-1", "b-2") for at in (T, T + 5.0))]


def test_a_healed_cut_is_kept_while_no_rank_has_stepped_since():
    """The cut healed 12 s ago, more than a quiet span, and the ranks last stepped before it:
    the cut is kept, unconfirmed (TCP retransmits what it dropped only after a backoff)."""
    cut = Cut(T - 20.0, T - 5.0, confirmed=False)
    rows = _healed_and_stalled_on()
    assert cut_off_ranks(rows, now=T + 7.0, last_step=T - 22.0) == {
        ("job", 2): cut,
        ("job", 3): cut,
    }


def test_a_healed_cut_is_dropped_once_every_rank_stepped_after_it():
    """The ranks' oldest last step came after the heal: no cut."""
    assert cut_off_ranks(_healed_and_stalled_on(), now=T + 7.0, last_step=T - 2.0) == {}


def test_a_cut_healed_longer_ago_than_tcps_longest_backoff_is_dropped():
    """The ranks last stepped before the cut, which healed more than ``RETRANSMIT_MAX_S`` ago:
    the stall that lasts is not the cut's."""
    now = T - 5.0 + RETRANSMIT_MAX_S + 1.0
    assert cut_off_ranks(_healed_and_stalled_on(), now=now, last_step=T - 22.0) == {}


def test_no_rank_is_named_while_a_stall_outlasts_the_heal():
    """Every rank stalled since before the cut, 12 s after it healed (a quiet span and more),
    rank 1 a collective behind: the report names no rank (the campaign's partition on DDP named
    rank 1, of the store's side, once the heal was 7.5 s old and TCP had yet to retransmit)."""
    beats = {f"job/rank-{r}": {**_beat(29.0), "wall_time": T + 7.0, "fr_seq": 72} for r in range(4)}
    beats["job/rank-1"]["fr_seq"] = 71
    report = report_of("logs", _healed_and_stalled_on(), RankGrid.from_series({}, beats))
    assert report.ranks is not None
    assert len(report.ranks.stalls) == 4 and report.ranks.waited_for == ()

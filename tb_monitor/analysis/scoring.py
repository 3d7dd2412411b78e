"""The scoring of rank health, on plain numpy grids: rows are ranks, columns are windows.

Why these rules (docs/DESIGN.md, "Rank health"): in synchronous data parallelism every rank's
step period is equal (fast ranks wait in the collective), so the signal is *compute*, step time
minus time waiting for the others (inside collectives, and in DDP's gradient all-reduces, which
run from C++): ``relative`` is a window's compute over the median rank's in that window,
``individual`` over the rank's own best; a rank is flagged after ``FLAG_WINDOWS`` consecutive
recorded windows above ``FLAG_THRESHOLD``; for a rank that steps at least twice a window, a
window in which it ended no step (a pause: a long garbage collection, a slow batch, an
evaluation) ends such a run, so slow steps on either side of pauses are no straggler. A rank is
stalled past ``STALL_FACTOR`` typical steps without a step and ``STALL_FLOOR_S`` without
progress of any kind (a step, a batch fetched, a collective left, a checkpoint save), and only
then; never while a rank whose beats go on saves a checkpoint or made progress within the floor
(the others wait for it). Where heartbeats carry no progress (older logdirs) or a rank has yet
to finish a step, steps alone count, past ``STEP_STALL_FLOOR_S``. Silence (its heartbeats
stopped while the others wait) and what its agent sees of its process explain a stall, they
never make one (a rank stopped from outside for part of each step still steps).
A rank starved of CPU (a cgroup's quota, a crowded core) is slow in its collectives too, so its
compute need not stand out: it is flagged as well after ``FLAG_WINDOWS`` consecutive windows in
which its threads waited for a CPU at least ``STARVED_SHARE`` of the time they were ready to run,
and ``STARVED_FACTOR`` times as long per second on a CPU as the window's median rank's (on a
busy machine every rank waits; compared to zero, all would be) and as the others usually wait
(they may wait less for a few windows), while it ran no more than ``STARVED_MOST_RUN`` times as
long on a CPU per step as the others did (a busier rank waits longer per second on a crowded
machine: busy, not held back).
:class:`tb_monitor.analysis.grid.RankGrid` applies them and answers with a :class:`Score` per
rank and a :class:`Stall` per stalled rank; every reader goes through it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tb_monitor import _env

__all__ = [
    "DEFAULT_STALL_FLOOR_S",
    "FLAG_THRESHOLD",
    "FLAG_WINDOWS",
    "PAUSE_STEP_SHARE",
    "STALL_FACTOR",
    "STALL_FLOOR_S",
    "STEP_STALL_FLOOR_S",
    "SILENT_SLACK_S",
    "SILENT_WINDOWS",
    "STARVED_FACTOR",
    "STARVED_MOST_RUN",
    "STARVED_SHARE",
    "Cut",
    "Score",
    "Stall",
    "individual_scores",
    "counted_windows",
    "longest_over",
    "past_stall_rule",
    "relative_scores",
    "stalled_ranks",
    "starved_reason",
    "starved_rows",
    "starved_windows",
]

#: A rank is flagged when its relative score stays above this for FLAG_WINDOWS windows.
FLAG_THRESHOLD = 1.2
FLAG_WINDOWS = 3
#: A window in which a rank ended no step breaks its run of slow windows where its typical step
#: is at most this share of a window: then the window is a pause (``counted_windows``).
PAUSE_STEP_SHARE = 0.5
#: A rank is stalled past STALL_FACTOR typical steps without a step boundary and STALL_FLOOR_S
#: without progress; where its heartbeats carry no progress (older logdirs), or before its first
#: step (a slow first step looks like a hang), past STEP_STALL_FLOOR_S without a step. Both are
#: ``$TB_MONITOR_STALL_FLOOR_S`` where that is set on the reading side (TensorBoard, ``report``).
#: Five typical steps, not ten: with steps of 1.3-1.5 s (the campaign's FSDP and Lightning jobs)
#: ten put the stall past 14 s, beyond the 15-s goal to name it once its beats are read; the
#: floor, without progress of any kind, is what keeps a slow step from reading as a hang.
STALL_FACTOR = 5.0
DEFAULT_STALL_FLOOR_S = 10.0
STALL_FLOOR_S = _env.seconds("TB_MONITOR_STALL_FLOOR_S", DEFAULT_STALL_FLOOR_S)
#: By steps alone (no progress known) a pause is harder to tell from a hang: a longer floor.
DEFAULT_STEP_STALL_FLOOR_S = 3 * DEFAULT_STALL_FLOOR_S
STEP_STALL_FLOOR_S = _env.seconds("TB_MONITOR_STALL_FLOOR_S", DEFAULT_STEP_STALL_FLOOR_S)
#: A rank is silent when its newest heartbeat is more than SILENT_WINDOWS windows (and
#: SILENT_SLACK_S, the writers' flush) older than the newest rank's while another rank waits: a
#: live rank beats every window. Silent, it is the rank waited for once stalled.
SILENT_WINDOWS = 1.5
SILENT_SLACK_S = 2.0
#: A rank is starved of CPU in a window when its threads waited for a CPU at least STARVED_SHARE
#: of the time they were ready to run, and STARVED_FACTOR times as long per second they ran as
#: the window's median rank's threads.
STARVED_SHARE = 0.5
STARVED_FACTOR = 2.0
#: ... and it ran no more than STARVED_MOST_RUN times as long on a CPU per step as that median
#: rank: a
#: rank busier than the others (a long garbage collection, a thread of its own) waits longer per
#: second on a crowded machine, because the scheduler favours the ranks that slept in a
#: collective; it is busy, not held back.
STARVED_MOST_RUN = 1.5

# ---------------------------------------------------------------------------------------------
# The scoring core, on plain numpy grids: rows are ranks, columns are windows (NaN: no window)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """One rank's straggler score over the grid's windows (medians over the windows it
    recorded; None where it has none)."""

    row: int  # -1: a rank that recorded nothing, known from its agent (``RankGrid.stalls``)
    rank: int
    run: str
    relative: float | None  # compute over the window's median rank's
    individual: float | None  # compute over the rank's own best window
    compute_s: float | None  # compute seconds per step
    windows_over: int  # longest run of consecutive windows above the threshold
    flagged: bool
    #: Share of its threads' runnable time spent waiting for a CPU (None: not recorded).
    starved: float | None = None
    starved_over: int = 0  # longest run of consecutive windows starved of CPU
    cause: str | None = None  # why it is flagged: "cpu" (starved of CPU) or "compute"
    reason: str | None = None  # that, in words, for the report and the Ranks view


@dataclass(frozen=True)
class Stall:
    """A rank whose progress stopped, from its newest heartbeat."""

    row: int  # -1: a rank that recorded nothing, known from its agent (``RankGrid.stalls``)
    rank: int
    run: str
    since_step_s: float  # seconds without a step boundary, up to when stalls are judged
    entered: int  # sequence number of the last collective entered from Python
    left: int
    in_collective: bool
    fr_seq: int | None  # newest collective in torch's Flight Recorder, None where not read
    waited_for: bool  # the rank the others wait for
    silent: bool = False  # its heartbeats stopped while the others' went on
    cut_off: bool = False  # its node lost the rendezvous store while another kept it


def relative_scores(compute: np.ndarray) -> np.ndarray:
    """Each cell's compute time over the median of all ranks in its window (NaN where the
    window's median is 0 or the cell is missing)."""
    compute = np.asarray(compute)
    if compute.size == 0:
        return compute.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows
        median = np.nanmedian(compute, axis=0)
    median = np.where(median > 0, median, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return compute / median[np.newaxis, :]


def individual_scores(compute: np.ndarray) -> np.ndarray:
    """Each cell's compute time over its rank's own best (smallest) window."""
    compute = np.asarray(compute)
    if compute.size == 0:
        return compute.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        best = np.nanmin(compute, axis=1)
    best = np.where(best > 0, best, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return compute / best[:, np.newaxis]


def starved_windows(
    share: np.ndarray,
    factor: float = STARVED_FACTOR,
    floor: float = STARVED_SHARE,
    run: np.ndarray | None = None,
) -> np.ndarray:
    """Per cell, 1.0 where the rank was starved of CPU in that window, 0.0 where not, NaN
    where it recorded no CPU wait. ``share``: the share of its threads' runnable time spent
    waiting for a CPU. Starved: at least ``floor``, and ``factor`` times as long waiting per
    second on a CPU (``share / (1 - share)``) as the window's median rank (where only two ranks
    recorded the window, as the other one: a median of two would count the rank itself), and
    as that reference's median over the windows: a rank waiting as the others usually do is
    not starved while they wait less for a few windows (on a busy machine they will). Where
    ``run`` (seconds on a CPU per step) is given, a rank that ran over ``STARVED_MOST_RUN`` times as long
    as the same reference is not starved in that window."""
    share = np.asarray(share, dtype=np.float64)
    if share.size == 0:
        return share.copy()
    per_run = np.minimum(share, 0.999) / (1.0 - np.minimum(share, 0.999))
    typical = _the_others(per_run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a rank that recorded no wait
        usual = np.nanmedian(typical, axis=1, keepdims=True)  # what the others usually wait
    with np.errstate(invalid="ignore"):
        starved = (share >= floor) & (per_run >= factor * np.fmax(typical, usual))
        if run is not None:
            run = np.asarray(run, dtype=np.float64)
            starved &= ~(run > STARVED_MOST_RUN * _the_others(run))
    return np.where(np.isnan(share), np.nan, starved.astype(np.float64))


def _the_others(values: np.ndarray) -> np.ndarray:
    """Per cell, its window's median rank's value; where only two ranks recorded the window,
    the other one's (a median of two would count the rank itself)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # windows no rank recorded
        median = np.nanmedian(values, axis=0)
    recorded = np.sum(~np.isnan(values), axis=0)
    other = np.nansum(values, axis=0)[np.newaxis, :] - values
    return np.where(recorded[np.newaxis, :] == 2, other, median[np.newaxis, :])


def starved_rows(
    share: np.ndarray, present: np.ndarray, run: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Per rank (row): its median starved share over its windows and its longest run of
    starved windows (``starved_windows``, ``run``: seconds on a CPU); and the median rank's
    share (over the windows)."""
    share = np.asarray(share, dtype=np.float64)
    longest = longest_over(starved_windows(share, run=run), 0.5, present=present)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no window with a CPU wait
        rows = np.nanmedian(share, axis=1) if share.shape[1] else np.full(len(share), np.nan)
        typical = float(np.nanmedian(np.nanmedian(share, axis=0))) if share.size else math.nan
    return rows, longest, typical if math.isfinite(typical) else None


def starved_reason(share: float, median_share: float | None) -> str:
    """A starved rank's reason, as the report and the Ranks view show it."""
    median = "" if median_share is None else f" (the median rank {median_share:.0%})"
    return f"starved of CPU: {share:.0%} of its time waiting for a CPU{median}"


def counted_windows(steps: np.ndarray, typical_step_s: np.ndarray, window_s: float) -> np.ndarray:
    """Rows x windows: those each rank's runs of slow (or starved) windows are counted over,
    as ``longest_over``'s ``present``. The windows it recorded, and where its typical step
    (``typical_step_s``, per row) is at most ``PAUSE_STEP_SHARE`` of a window, those in which
    it ended no step: a pause of the rank (a long garbage collection, a slow batch) or of the
    whole job (an evaluation), which ends a spell of slowness. Found by the fault campaign:
    the steps around such pauses are slow, and three of them, pauses between, read as three
    slow windows in a row (with two ranks one slow batch puts a rank near x2 in its window).
    Where a rank's steps are longer, a window without one only lies between two steps, and
    neither counts nor breaks a run."""
    recorded = np.asarray(steps) > 0
    brisk = np.asarray(typical_step_s, dtype=np.float64) <= PAUSE_STEP_SHARE * window_s
    return recorded | brisk[:, np.newaxis]  # NaN (no typical step): never brisk


def longest_over(
    scores: np.ndarray, threshold: float = FLAG_THRESHOLD, present: np.ndarray | None = None
) -> np.ndarray:
    """Per rank (row), the longest run of consecutive windows whose score is above
    ``threshold``. Cells outside ``present`` (windows the rank did not record, or that were not
    kept) neither count nor break a run; a present window with no score (NaN) breaks it."""
    scores = np.asarray(scores, dtype=np.float64)
    rows, cols = scores.shape
    if not rows or not cols:
        return np.zeros(rows, dtype=np.int64)
    present = np.ones(scores.shape, dtype=bool) if present is None else np.asarray(present, bool)
    over = present & (np.nan_to_num(scores, nan=-np.inf) > threshold)
    broken = present & ~over
    # Windows over so far, minus as many at the last break: the run ending at each cell.
    count = np.cumsum(over, axis=1)
    at_break = np.maximum.accumulate(np.where(broken, count, 0), axis=1)
    return (count - at_break).max(axis=1).astype(np.int64)


@dataclass(frozen=True)
class Cut:
    """A node's time without the rendezvous store (``store_contact.cut_off_ranks``): from its
    agent's last keep-alive before it (``since``) until its next (``healed``; None while it
    holds). ``confirmed`` once another agent's keep-alives went on past the quiet span; until
    then (a keep-alive only overdue while another agent's come), and for a while after it healed
    (its ranks' beats still to show them stepping), who is waited for is not named: a read then
    would name whichever rank the cut left a collective behind."""

    since: float
    healed: float | None = None
    confirmed: bool = True

    def explains(self, stall_began: float) -> bool:
        """A stall that began before the cut healed is the cut's."""
        return self.healed is None or stall_began <= self.healed


def stalled_ranks(
    beats: Mapping[int, Mapping[str, float]],
    typical_step_s: Mapping[int, float],
    *,
    now: float | None = None,
    factor: float = STALL_FACTOR,
    floor_s: float | None = None,
    silent_after_s: float = float("inf"),
    cut_off: Mapping[int, Cut] | None = None,
    seen_silent: Collection[int] = (),
) -> list[dict[str, Any]]:
    """The stalled ranks from each rank's newest heartbeat values.

    ``beats[rank]`` holds ``wall_time`` (its newest heartbeat's) and the heartbeat Stats' values
    by name (``contract.RANK_BEATS``). Returns dicts (``_stall_row``; ``waited_for``: see
    ``_mark_waited_for``), the waited-for first.

    A rank is stalled when its time without a step passes ``factor`` typical steps and the
    floor, and its time without progress (``since_progress_s``: a batch, a collective left, a
    save) passes the floor; each its newest beat's value plus the time since that beat, so a
    rank whose heartbeats stopped still counts. No rank is stalled while one whose beats go on
    saves a checkpoint (``in_save_s``) or made progress within the floor. ``floor_s``
    (default ``STALL_FLOOR_S``) holds for every rank when given; by default a rank whose beats carry no progress (an older logdir), or that has yet to finish a
    step, is judged by steps alone past ``STEP_STALL_FLOOR_S``. It is ``silent`` when its
    newest heartbeat lags the newest rank's by more than ``silent_after_s`` while another rank
    has not stepped for half that long; silence makes no stall, but a silent stalled rank is the
    one waited for: of several, those its agent sees silent (``seen_silent``: stopped, in the
    kernel, no pulse), else those behind in the collectives. Unless an agent sees a rank
    silent, the stalled ranks of ``cut_off`` whose stall the cut explains are, before the
    silence and collective rules (their node's keep-alives to the rendezvous store stopped
    while another node's went on: ``store_contact.cut_off_ranks``); while such a cut is not
    yet confirmed, none is.

    A silent rank's newest beat may predate the steps it took with the others until it stopped
    (a beat is logged once a window, written at the next flush): it has gone no longer without
    a step than the longest of the ranks that wait for it, and took as many steps as they did."""
    if not beats:
        return []
    now = max(float(b["wall_time"]) for b in beats.values()) if now is None else now
    counts = {
        rank: float(beat["since_step_s"]) + now - float(beat["wall_time"])
        for rank, beat in beats.items()
        if beat.get("since_step_s") is not None
    }
    silent, longest_wait = _silence(beats, counts, silent_after_s)
    if _progressing(beats, now, silent_after_s, STALL_FLOOR_S if floor_s is None else floor_s):
        return []
    job_steps = max(float(beat.get("steps") or 0.0) for beat in beats.values())
    rows = []
    for rank, since in counts.items():
        beat = beats[rank]
        if rank in silent:  # it took the steps the others took, until it stopped
            since = min(since, longest_wait)
            beat = {**beat, "steps": max(float(beat.get("steps") or 0.0), job_steps)}
        step_limit = factor * float(typical_step_s.get(rank) or 0.0)
        if _stalled(beat, now, since, step_limit, floor_s):
            rows.append(_stall_row(rank, beats[rank], since, rank in silent))
    _mark_waited_for(rows, bool(silent), seen_silent)
    _mark_cut_off(rows, cut_off or {}, silent & set(seen_silent), now)
    rows.sort(key=lambda row: (row["waited_for"], row["since_step_s"]), reverse=True)
    return rows


def _stalled(
    beat: Mapping[str, float], now: float, since: float, step_limit: float, floor_s: float | None
) -> bool:
    """One rank's verdict (see ``stalled_ranks``) from its newest beat: where the beat carries
    no progress, or no step is timed yet, by steps alone past the longer floor."""
    progress = beat.get("since_progress_s")
    if progress is None or float(beat.get("steps") or 0.0) < 2:  # no step timed yet
        floor = STEP_STALL_FLOOR_S if floor_s is None else floor_s
        return past_stall_rule(since, math.inf, step_limit, floor)
    without_progress = float(progress) + now - float(beat["wall_time"])
    floor = STALL_FLOOR_S if floor_s is None else floor_s
    return past_stall_rule(since, without_progress, step_limit, floor)


def past_stall_rule(
    since_step_s: float, since_progress_s: float, step_limit_s: float, floor_s: float
) -> bool:
    """The stall rule for one rank, wherever it is judged (a reader, an agent): no step for
    ``step_limit_s`` (its typical steps times ``STALL_FACTOR``) and the floor, and no progress
    of any kind for the floor (``math.inf`` where none is known)."""
    return since_step_s > max(floor_s, step_limit_s) and since_progress_s > floor_s


def _progressing(
    beats: Mapping[int, Mapping[str, float]], now: float, silent_after_s: float, floor: float
) -> bool:
    """A rank whose beats go on is inside a checkpoint save, or made progress within the floor:
    the others wait for it (a save, or its end a beat ago: they have yet to beat since). One
    whose beats stopped is judged as any other."""
    for beat in beats.values():
        progress, age = beat.get("since_progress_s"), now - float(beat["wall_time"])
        if progress is None or age > silent_after_s:
            continue
        if float(beat.get("in_save_s") or 0.0) > 0 or float(progress) + age <= floor:
            return True
    return False


def _stall_row(rank: int, beat: Mapping[str, float], since: float, silent: bool) -> dict[str, Any]:
    """A stalled rank's row (``waited_for`` is set once every row is known)."""
    fr_seq = beat.get("fr_seq")
    return {
        "rank": int(rank),
        "since_step_s": since,
        "entered": int(beat.get("entered") or 0),
        "left": int(beat.get("left") or 0),
        "in_collective": float(beat.get("in_collective_s") or 0.0) > 0,
        # -1: steps resumed since it was read, no current value
        "fr_seq": None if fr_seq is None or fr_seq < 0 else int(fr_seq),
        "silent": silent,
        "cut_off": False,
    }


def _mark_waited_for(
    rows: list[dict[str, Any]], silence: bool, seen_silent: Collection[int] = ()
) -> None:
    """Set each stalled row's ``waited_for``: a rank outside the collective the others are in,
    or behind them in its collectives' sequence; while a rank is silent (the others wait for
    it), the silent ones, and of those the ones their agents see silent where any is, else the
    ones behind where any is (a rank whose beats merely come late on a loaded machine lags about
    as long, but its agent hears its pulse, and its newest beat may be inside the collective)."""
    inside_any = any(row["in_collective"] for row in rows)
    most = max((row["entered"] for row in rows), default=0)
    fr_most = max((row["fr_seq"] for row in rows if row["fr_seq"] is not None), default=None)
    in_sequence = {
        row["rank"]
        for row in rows
        if row["entered"] < most or (row["fr_seq"] is not None and row["fr_seq"] < fr_most)
    }
    outside = {row["rank"] for row in rows if not row["in_collective"] and inside_any}
    behind = in_sequence | outside
    if silence:  # a rank behind in the sequence whose beats go on outranks silent ranks ahead
        silent = {row["rank"] for row in rows if row["silent"]}
        behind = (silent & set(seen_silent)) or (silent & behind) or in_sequence or silent
    for row in rows:
        row["waited_for"] = row["rank"] in behind


def _mark_cut_off(
    rows: list[dict[str, Any]],
    cut_off: Mapping[int, Cut],
    seen_silent: Collection[int],
    now: float,
) -> None:
    """Unless its agent sees a rank silent (``seen_silent``), the stalled rows of ``cut_off``
    whose stall the cut explains are the ones waited for, marked ``cut_off``: a partition holds
    every rank, and which one reads outside or behind in the collectives, or whose beats come
    late, then is chance (FSDP2's collectives go around our wrapper; a read of a partitioned DDP
    job found the beats of two ranks on the store's side 4 s late). While the only cuts are
    unconfirmed (a keep-alive overdue), no rank is named: the chance rules would name one."""
    if seen_silent:
        return
    confirmed = {  # rank -> its cut confirmed, for the rows whose stall a cut explains
        row["rank"]: cut.confirmed
        for row in rows
        if (cut := cut_off.get(row["rank"])) and cut.explains(now - row["since_step_s"])
    }
    if not confirmed:
        return
    for row in rows:
        row["waited_for"] = row["cut_off"] = confirmed.get(row["rank"], False)


def _silence(
    beats: Mapping[int, Mapping[str, float]], counts: Mapping[int, float], silent_after_s: float
) -> tuple[set[int], float]:
    """The silent ranks (see ``stalled_ranks``): their beats lag while another rank waits (it
    has not stepped for half of ``silent_after_s``); and the longest time without a step of the
    ranks whose beats do not lag. A rank whose beats merely stopped while the others step on is
    not silent: it ended (a finished rank, a node the job went on without)."""
    newest = max(float(b["wall_time"]) for b in beats.values())
    lag = {rank: newest - float(beats[rank]["wall_time"]) for rank in counts}
    lagging = {rank for rank, late in lag.items() if late > silent_after_s}
    longest = max((since for rank, since in counts.items() if rank not in lagging), default=0.0)
    if longest <= silent_after_s / 2:
        return set(), longest
    # On a loaded machine a waiting rank's beats come late too; the one that stopped lags on
    # and on: silent are the ranks that lag about as long as the most (within the allowance).
    most = max((lag[rank] for rank in lagging), default=0.0)
    return {rank for rank in lagging if lag[rank] > most - silent_after_s}, longest

"""The words of the job's report: each attempt, its root cause, the ranks that went down with it,
the ranks' stragglers and stalls, the verdicts. ``tb_monitor.analysis.report`` puts them
together into what ``tb-monitor report`` prints and a notebook shows for a ``JobReport``.

Readable in a CI log or over ssh, in the spirit of ``git status``: each job, its attempts with
outcome and duration, each failed attempt's root cause (rank, host, the exception's last line or
the signal that killed it), the ranks that went down with it (stopped by the restart, or when
the job ended), the time lost to restarts, the nodes that left or joined; then the ranks'
stragglers and stalls (under each job where the logdir holds several), and a verdict.

What an event recorded (a host name, a run id, an exception message, a stack) goes through
:func:`visible` first: an escape sequence, a carriage return or a bidi override in it would
otherwise reach the terminal raw and could rewrite or reorder the report (a FAILED line that
reads as SUCCEEDED). Such characters are shown as their escapes (``\x1b``, ``\u202e``).
"""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from tb_monitor.analysis.restart_marks import STOPPED_WORDS
from tb_monitor.analysis.root_cause import ranks_words
from tb_monitor.analysis.scoring import FLAG_THRESHOLD

if TYPE_CHECKING:
    from tb_monitor.analysis.agent_views import AgentView
    from tb_monitor.analysis.attempts import Attempt
    from tb_monitor.analysis.grid import Score, Stall
    from tb_monitor.analysis.rank_report import RankHealth
    from tb_monitor.analysis.roll_call import RollCall
    from tb_monitor.analysis.root_cause import RootCause

__all__ = [
    "VERDICTS",
    "attempt_lines",
    "duration",
    "plural",
    "ranks_lines",
    "stalled_line",
    "verdict_line",
    "visible",
]

#: Unicode categories never written raw: controls (ESC, CR, DEL, the C1 set), format characters
#: (bidi overrides and isolates, zero-width ones), line and paragraph separators, surrogates.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})

WAITING_WORDS = "no record ended them: their agent goes on"
VERDICTS = {
    "empty": "nothing to report",
    "failed": "FAILED: the last attempt failed (exit code 1)",
    "running": "running",
    "succeeded": "healthy: every job succeeded",
    "terminated": "TERMINATED: a signal to its agent ended the job (a preemption; exit code 1)",
    "hung": "HUNG: the job hung where its attempt before hung; not restarted again (exit code 3)",
}


def visible(text: str, keep: str = "") -> str:
    """``text`` safe to print: each character that could move the cursor, start an escape
    sequence or reorder the line is shown as its escape (``\\x1b``, ``\\u202e``); the
    characters in ``keep`` (a tab in a stack line) are left as they are."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch in keep or unicodedata.category(ch) not in _HIDDEN else _escape(ch) for ch in text
    )


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _clock(t: float, ms: bool = False) -> str:
    when = datetime.fromtimestamp(t, tz=timezone.utc)
    return when.strftime("%H:%M:%S.%f")[:-3] if ms else when.strftime("%H:%M:%S")


def duration(seconds: float | None) -> str:
    """``seconds`` as a person reads it, rounded before it is split (119.9 s is 2 min 0 s)."""
    if seconds is None:
        return "?"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f} s"
    if round(seconds) < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min"


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _render_cause(cause: RootCause) -> list[str]:
    where = cause.node if cause.source in ("vanished", "cut_off") else cause.host
    host = f" on {visible(where)}" if where else ""
    lines = [
        f"    root cause      {ranks_words(cause.ranks)}{host} at {_clock(cause.time, True)}",
        f"                    {visible(cause.reason)}",
    ]
    seen = f"; first seen by {visible(cause.seen_by)}" if cause.seen_by else ""
    if cause.source == "vanished":
        lines.append(f"                    (no exit recorded, its agent went silent{seen})")
    if cause.source == "cut_off":
        lines.append(f"                    (its agent lost the rendezvous store{seen})")
    code = []
    if cause.signal and cause.signal not in cause.reason:
        code.append(f"signal {visible(cause.signal)}")
    if cause.exit_code is not None:
        code.append(f"exit code {cause.exit_code}")
    if code:
        lines.append(f"                    ({', '.join(code)})")
    return lines


def verdict_line(status: str, waiting: list[int]) -> str:
    """The verdict of the logdir's ``status``; ``waiting``: ranks of a failed job that still run,
    which nothing ends but the user."""
    if waiting:
        words = "still wait for the failed rank: end the job"
        return f"{VERDICTS[status]}; {ranks_words(waiting)} {words}"
    return VERDICTS[status]


def attempt_lines(a: Attempt, later: Attempt | None, waiting: tuple[int, ...] = ()) -> list[str]:
    """One attempt's lines; ``waiting``: its collateral ranks that still run (``JobHealth``)."""
    lines = [
        f"  attempt {a.attempt:<3} {visible(a.outcome):<10} {duration(a.duration_s):>9}"
        f"   {_clock(a.start)} → {_clock(a.end)}"
        f"   {plural(len(a.ranks), 'rank')} on {plural(len(a.nodes), 'node')}"
    ]
    if a.root_cause is not None:
        lines.extend(_render_cause(a.root_cause))
    stopped = [rank for rank in a.collateral_ranks if rank not in waiting]
    if stopped:
        how = STOPPED_WORDS[a.collateral_state]
        lines.append(f"    went down with  {ranks_words(stopped)} ({how})")
    if waiting:
        lines.append(f"    still waiting   {ranks_words(waiting)} ({WAITING_WORDS})")
    if a.time_lost_s is not None and later is not None:
        until = f"attempt {later.attempt} started"
        lines.append(f"    time lost       {duration(a.time_lost_s)} (until {until})")
    if a.nodes_left:
        lines.append(f"    nodes left      {visible(', '.join(a.nodes_left))}")
    if a.nodes_joined:
        lines.append(f"    nodes joined    {visible(', '.join(a.nodes_joined))}")
    return lines


def _score(s: Score) -> str:
    relative = "?" if s.relative is None else f"x{s.relative:.2f}"
    return f"rank {s.rank} {relative}"


def _render_stall(stall: Stall, label: str, view: AgentView | None = None) -> str:
    if stall.silent:
        what = "silent: no heartbeat while the others' went on"
        what += ", the others wait for it" if stall.waited_for else ""
    elif stall.cut_off:
        what = "the others wait for it: its node is cut off from the rendezvous store's"
    elif stall.waited_for:
        what = "the others wait for it: it has not entered their collective"
    elif stall.in_collective:
        what = "waiting inside a collective"
    else:
        what = "no progress"
    recorder = "" if stall.fr_seq is None else f" · Flight Recorder at collective {stall.fr_seq}"
    return (
        f"  {label:<15} rank {stall.rank}: {what} · no step for {duration(stall.since_step_s)}"
        f" · collectives entered {stall.entered}, left {stall.left}{recorder}"
    ) + _render_view(view)


_STACK_LINES = 40  # of a rank's stacks in the text; report --json holds them whole


def _render_view(view: AgentView | None) -> str:
    """What the rank's agent saw of its process, and its stacks, indented under its stall."""
    if view is None:
        return ""
    seen = visible(view.seen or "responding")
    state = visible(str(view.process_state))
    lines = [f"{'':18}its agent sees: {seen} (process state {state}, pid {view.pid})"]
    if view.stacks is None:
        lines.append(f"{'':18}stacks: {visible(str(view.stacks_note))}")
    else:
        stack = view.stacks.rstrip().splitlines()
        lines.append(f"{'':18}stacks ({visible(str(view.stacks_reason))}):")
        lines.extend(f"{'':20}{visible(line, keep=chr(9))}" for line in stack[:_STACK_LINES])
        if len(stack) > _STACK_LINES:
            lines.append(f"{'':20}... {len(stack) - _STACK_LINES} more lines in report --json")
    return "\n" + "\n".join(lines)


def _roll_call_lines(call: RollCall) -> list[str]:
    """The roll-call, the odd one out first, each group with its first rank's main thread."""
    lines = [f"  roll-call       {visible(call.words())}"]
    for group in call.groups:
        stack = group.main_stack()
        lines.append(f"{'':18}{visible(group.words())}, main thread ({visible(group.method)}):")
        lines.extend(f"{'':20}{visible(line, keep=chr(9))}" for line in stack[:_STACK_LINES])
        if len(stack) > _STACK_LINES:
            lines.append(f"{'':20}... {len(stack) - _STACK_LINES} more lines in report --json")
    return lines


def ranks_lines(ranks: RankHealth, stalled: bool) -> list[str]:
    lines = [
        "",
        f"ranks: {plural(ranks.count, 'rank')} recorded their health, "
        f"{plural(ranks.windows, 'window')} (compute time relative to the median rank)",
    ]
    if ranks.roll_call is not None:  # the odd one out is the answer: before all else
        lines.extend(_roll_call_lines(ranks.roll_call))
    for s in ranks.stragglers:
        if s.cause == "cpu":  # its compute may look normal: the reason says where its time went
            lines.append(
                f"  straggler       {_score(s)} the median rank, {s.reason}"
                f" ({s.starved_over} windows in a row)"
            )
            continue
        lines.append(
            f"  straggler       {_score(s)} the median rank "
            f"({s.windows_over} windows in a row over x{FLAG_THRESHOLD:g})"
        )
    if not ranks.stragglers:
        lines.append("  stragglers      none")
    if ranks.slowest:
        lines.append(f"  slowest         {', '.join(_score(s) for s in ranks.slowest)}")
    label = "STALLED" if stalled else "stalled"
    lines.extend(_render_stall(s, label, ranks.view_of(s)) for s in ranks.stalls)
    return lines


def stalled_line(job: str, ranks: RankHealth | None) -> str:
    waited = ranks.waited_for if ranks else ()
    who = f"{job} waits for {ranks_words(waited)}" if waited else f"progress stopped in {job}"
    return f"STALLED: {who} (exit code 1)"

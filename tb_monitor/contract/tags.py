"""Tag names and the timeline plugin's metadata: how a record is named in a logdir."""

from __future__ import annotations

import json

__all__ = [
    "AGENT",
    "AGENT_HUNG",
    "AGENT_STOPPING",
    "CONTENT_VERSION",
    "FR_COLLECTIVE",
    "KINDS",
    "LOGDIR_ENV",
    "MONITOR",
    "PLUGIN_NAME",
    "RANK_CAPTURE",
    "RANK_SEEN",
    "RANK_STACKS",
    "RENDEZVOUS",
    "STAT_EVENT",
    "TIMELINE_PREFIX",
    "WORKER",
    "kind_of_tag",
    "metric_tag",
    "plugin_content",
    "stat_tag",
    "timeline_tag",
]

#: Name of the TensorBoard plugin that owns the timeline records (also its dashboard URL hash).
PLUGIN_NAME = "tb_monitor_timeline"
#: Version of the timeline record layout, stored in ``SummaryMetadata.plugin_data.content``.
#: Version 1: one event per record. Version 2: several events per record (``encode_batch``).
#: Version 3: the same, with the record's index in binary. Version 4: the events as columns
#: (``encode_columnar``). Version 5, what the writer writes: version 4 with the events' times
#: as uint32 steps (``dd_le32``) where they fit. Readers tell them apart per record,
#: by the tensor's rank and the index's keys (TensorBoard keeps a tag's first
#: metadata only, and a restarted writer may continue a version-1 run).
CONTENT_VERSION = 5

#: Name torch.monitor gives the event it logs when a Stat window closes.
STAT_EVENT = "torch.monitor.Stat"

#: Kinds of timeline record. Each kind is one tag per run: ``timeline/<kind>``.
RENDEZVOUS = "rendezvous"  # torchelastic RdzvEvent (dynamic_rendezvous)
AGENT = "agent"  # torchelastic Event with source AGENT
WORKER = "worker"  # torchelastic Event with source WORKER (agent-side or worker-side)
MONITOR = "monitor"  # a torch.monitor-style Event other than a Stat window
KINDS = (RENDEZVOUS, AGENT, WORKER, MONITOR)

#: Prefix of every timeline tag.
TIMELINE_PREFIX = "timeline/"

#: Environment variable through which `tb-monitor run` hands its logdir to the processes it starts.
LOGDIR_ENV = "TB_MONITOR_LOGDIR"

#: Timeline records (source WORKER, in the agent's run) of what a worker's agent sees of its
#: process (``tb_monitor.launcher.rank_watch``): RANK_SEEN when that changes (state SILENT with
#: ``seen`` "stopped", "uninterruptible sleep" or "alive but silent"; RESPONDING when it speaks
#: again), RANK_STACKS with ``stacks``, every thread's Python stack as the worker dumped it.
RANK_SEEN = "tb_monitor.rank.seen"
#: The ``seen`` words, and the ``/proc`` states of a process held where it is (their ``seen``).
SEEN_STOPPED, SEEN_UNINTERRUPTIBLE, SEEN_SILENT = (
    "stopped",
    "uninterruptible sleep",
    "alive but silent",
)
HELD_STATES = {"T": SEEN_STOPPED, "t": SEEN_STOPPED, "D": SEEN_UNINTERRUPTIBLE}
RANK_STACKS = "tb_monitor.rank.stacks"
#: The agent of ``tb-monitor run`` began stopping its workers (a signal to it, a rank's failure,
#: a restart): what they do from then on is the stop's doing, not a stall (state STOPPING).
AGENT_STOPPING = "tb_monitor.agent.stopping"
#: A capture of one rank on demand (``launcher.capture``; source WORKER, the agent's run):
#: ``capture`` (its id), ``reason``, ``seconds`` of profile, ``files`` (JSON: kind -> path
#: relative to the logdir) and ``errors`` (JSON: kind -> why it is missing).
RANK_CAPTURE = "tb_monitor.rank.capture"
#: The agent of ``tb-monitor run --restart-hung-after`` ended a hung attempt (source AGENT,
#: state HUNG, ``launcher.hung``): ``stalled_since``, ``after_s``, ``action`` ("restart" or
#: "give up": it hung at the same place as the attempt before), ``where`` (its workers' frames).
AGENT_HUNG = "tb_monitor.agent.hung"

#: Monitor timeline records (``timeline/monitor``) of one rank's collective as torch's Flight
#: Recorder held it, one run per rank (``tb-monitor import-fr``): ``data`` is the recorder's
#: entry (``tb_monitor.analysis.fr_records``) with ``rank``, the group's ``group_ranks``, and
#: ``end`` (epoch s) and ``open`` (not completed when dumped), so the Timeline draws it as an
#: interval and the report can match the ranks' collectives again.
FR_COLLECTIVE = "tb_monitor.fr.collective"


def timeline_tag(kind: str) -> str:
    """Tag of the timeline records of one kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown timeline kind {kind!r}; expected one of {KINDS}")
    return TIMELINE_PREFIX + kind


def kind_of_tag(tag: str) -> str | None:
    """The timeline kind a tag holds, or None when the tag is not a timeline tag."""
    if tag.startswith(TIMELINE_PREFIX):
        kind = tag[len(TIMELINE_PREFIX) :]
        if kind in KINDS:
            return kind
    return None


def plugin_content() -> bytes:
    """``plugin_data.content`` of every timeline record: the layout version, as JSON."""
    return json.dumps({"version": CONTENT_VERSION}).encode()


def _writable(tag: str, what: str, value: str) -> str:
    """``tag``, or a ValueError naming ``value`` when it is no valid Unicode (a lone surrogate
    cannot be written to an event file)."""
    try:
        tag.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what} {value!r} cannot be written: it is not valid Unicode (a lone surrogate)"
        ) from None
    return tag


def stat_tag(stat_name: str, aggregation: str) -> str:
    """Scalar tag of one aggregation of a Stat window, named as torch.monitor names it."""
    return _writable(f"{stat_name}.{aggregation.lower()}", "Stat name", stat_name)


def metric_tag(group: str, name: str) -> str:
    """Scalar tag of a torchelastic metric: TensorBoard sections tags by the prefix."""
    return _writable(f"{group}/{name}", "metric", f"{group}/{name}")

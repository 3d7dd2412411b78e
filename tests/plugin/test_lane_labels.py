"""Lane labels in pieces, ours and the records' in turn: each piece a record holds (a host name,
a pid or rank written as text, a run's name) is one of its own, for the page to isolate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from plugin_helpers import refreshed_store
from tensorboard import context as tb_context

from tb_monitor import contract, timeline
from tb_monitor.elastic.events.api import RdzvEvent
from tb_monitor.sinks.writer import AsyncWriter
from tb_plugin.lane_labels import label_parts
from tb_plugin.query import timeline_payload
from tb_plugin.requests import Query

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
HOST = f"evil{RLO}host"
_FIELD = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.text(max_size=6)


def _lane(kind: str, run: str = "job/agent-0", **fields) -> timeline.Lane:
    row = {"run_id": "job", "hostname": None, "pid": None, "local_id": None, "rank": None}
    return timeline.lane_of({**row, "run": run, "kind": kind, **fields})


def test_a_host_name_is_a_piece_of_its_own_and_the_pid_after_it_is_ours():
    """A rendezvous lane's host name is the records' piece alone; "(pid 4242)" is ours."""
    lane = _lane(contract.RENDEZVOUS, hostname=HOST, pid=4242, local_id=0)
    assert label_parts(lane) == ["", HOST, " (pid 4242)"]


def test_a_pid_or_local_id_recorded_as_text_is_a_piece_of_the_records():
    """Text where a rendezvous lane's pid or local id goes is the records', each on its own."""
    lane = _lane(contract.RENDEZVOUS, hostname="h", pid=f"1{RLO}2", local_id="x")
    assert label_parts(lane) == ["", "h", " (pid ", f"1{RLO}2", ", id ", "x", ")"]


def test_a_rank_recorded_as_text_is_a_piece_of_the_records():
    """A worker lane's rank is ours when a number, the records' when text."""
    assert label_parts(_lane(contract.WORKER, rank=3)) == ["rank 3"]
    assert label_parts(_lane(contract.WORKER, rank=f"3{RLO}")) == ["rank ", f"3{RLO}"]


def test_an_agent_lane_s_host_name_is_a_piece_of_the_records():
    """An agent lane reads "agent " and its host name, the records'."""
    lane = _lane(contract.AGENT, run="agent-0", hostname=HOST)
    assert label_parts(lane) == ["agent ", HOST]


def test_a_label_made_of_a_run_s_name_is_the_records_whole():
    """A lane labelled with its run's name (a monitor lane) is one piece of the records'."""
    lane = _lane(contract.MONITOR, run=f"job/mon{RLO}itor")
    assert label_parts(lane) == ["", f"mon{RLO}itor"]


@given(
    kind=st.sampled_from(contract.KINDS),
    run=st.sampled_from(["job/agent-0", "agent-0", "."]),
    fields=st.fixed_dictionaries(
        {"hostname": _FIELD, "pid": _FIELD, "local_id": _FIELD, "rank": _FIELD}
    ),
)
def test_the_parts_of_any_lane_join_to_its_label(kind, run, fields):
    """Whatever a record holds, a lane's parts, ours first, join to its label."""
    lane = _lane(kind, run=run, **fields)
    assert "".join(label_parts(lane)) == lane.label


def _hostile_logdir(tmp_path) -> str:
    beat = RdzvEvent("x._keep_alive", "job", "hostilelane", HOST, 4242, "RUNNING", local_id=0)
    with AsyncWriter(tmp_path / "job" / "agent-0") as writer:
        writer.add_timeline(contract.RENDEZVOUS, beat.serialize(), 1_700_000_000.0)
    return str(tmp_path)


def test_the_timeline_payload_sends_each_lane_s_parts(tmp_path):
    """Beside each lane's label, the payload sends its parts: the host name a piece alone."""
    snap = refreshed_store(_hostile_logdir(tmp_path)).snapshot()
    lanes = timeline_payload(snap, Query(width=500))["lanes"]
    assert lanes["label"] == [f"{HOST} (pid 4242)"]
    assert lanes["parts"] == [["", HOST, " (pid 4242)"]]


def test_an_event_s_details_send_its_lane_s_parts(tmp_path):
    """The event route's details carry the lane's parts beside its label."""
    details = refreshed_store(_hostile_logdir(tmp_path)).event(tb_context.RequestContext(), 0)
    assert details["lane"] == f"{HOST} (pid 4242)"
    assert details["lane_parts"] == ["", HOST, " (pid 4242)"]

"""The Ranks view names a silent rank and shows what its agent saw of it, and its stacks."""

from __future__ import annotations

import json

from test_routes import App

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event, EventSource
from tb_monitor.sinks.writer import AsyncWriter
from tb_monitor.testing import DEFAULT_START, rank_heartbeat_scalars, rank_window_scalars

ROUTE = f"/data/plugin/{contract.PLUGIN_NAME}/ranks"


def _agent_record(name: str, state: str, when: float, **metadata) -> str:
    meta = {"run_id": "job", "global_rank": 3, "pid": 77, "state": state, **metadata}
    return Event(name, EventSource.WORKER, int(when * 1000), meta).serialize()


def _silent_job(logdir, stacks: bool) -> None:
    """Four ranks; rank 3's heartbeats stop at +20 s while the others' beat on without a step
    to +60 s, past the stall floor; its agent saw it stopped (and, with ``stacks``, recorded its
    stacks after)."""
    for rank in range(4):
        with AsyncWriter(logdir / "job" / f"rank-{rank}") as writer:
            for i in range(3):
                writer.add_scalars(rank_window_scalars(0.1, 0.01, 50), DEFAULT_START + 10 * i)
            last, since = (DEFAULT_START + 20, 0.05) if rank == 3 else (DEFAULT_START + 60, 40.0)
            writer.add_scalars(rank_heartbeat_scalars(100, 10, 10, 0.0, since), wall_time=last)
    with AsyncWriter(logdir / "job" / "agent-b-1") as writer:
        seen = {"seen": "stopped", "process_state": "T", "message": "its process is stopped"}
        when = DEFAULT_START + 22
        writer.add_timeline(
            contract.WORKER, _agent_record(contract.RANK_SEEN, "SILENT", when, **seen), when
        )
        if stacks:
            dump = 'Current thread 0x1 (most recent call first):\n  File "t.py", line 3 in f\n'
            record = _agent_record(
                contract.RANK_STACKS, "STACKS", when + 1, stacks=dump, message="x, dumped now"
            )
            writer.add_timeline(contract.WORKER, record, when + 1)


def test_ranks_route_names_the_stopped_rank_with_its_agents_view(tmp_path):
    """Rank 3 is the silent rank the job waits for; its agent saw it stopped: no stacks."""
    _silent_job(tmp_path, stacks=False)
    body = App(tmp_path).json(ROUTE)
    stall = body["stalls"][0]
    assert (stall["rank"], stall["waited_for"], stall["silent"]) == (3, True, True)
    assert stall["agent"]["seen"] == "stopped"
    assert stall["agent"]["stacks"] is None
    assert stall["agent"]["stacks_note"].startswith("stopped: no stacks")


def test_ranks_route_carries_the_silent_ranks_stacks(tmp_path):
    """Stacks its agent recorded after it saw the rank silent come with the stall."""
    _silent_job(tmp_path, stacks=True)
    stall = App(tmp_path).json(ROUTE)["stalls"][0]
    assert stall["rank"] == 3 and "line 3 in f" in stall["agent"]["stacks"]
    assert stall["agent"]["stacks_reason"] == "dumped now"


def test_ranks_route_carries_the_roll_call_odd_one_first(tmp_path):
    """A roll-call recorded by the agent comes with the stalls, the odd rank first."""
    _silent_job(tmp_path, stacks=False)
    when = DEFAULT_START + 30
    with AsyncWriter(tmp_path / "job" / "agent-a-1") as writer:
        for rank, line in ((0, 42), (1, 42), (2, 42), (3, 40)):
            frames = json.dumps([{"name": "f", "file": "/t.py", "line": line, "native": False}])
            meta = {"global_rank": rank, "roll_call": "a@1", "stalled_since": when - 10}
            record = _agent_record(
                contract.RANK_STACKS, "STACKS", when, stacks="...", frames=frames, **meta
            )
            writer.add_timeline(contract.WORKER, record, when)
    call = App(tmp_path).json(ROUTE)["roll_call"]
    assert [g["ranks"] for g in call["groups"]] == [[3], [0, 1, 2]]

"""What torch's c10d rendezvous records, in its own words: a node joining a round, a keep-alive.

A node joins a round through ``DynamicRendezvousHandler.next_rendezvous``: it says it attempts
to join, its ``_DistributedRendezvousOpExecutor`` adds it to the participants and syncs, the last
node to arrive marks the round complete, and the handler says the node has joined, as which rank.

``DynamicRendezvousHandler._keep_alive`` runs the keep-alive operation through its
``_DistributedRendezvousOpExecutor``. The executor records that it updated the node's heartbeat
time (its ``_keep_alive``), then, once it has written the change to the store, that it synced
(its ``run``); last the handler records that the heartbeat was sent (its ``_keep_alive``). Each
is a RUNNING ``RdzvEvent`` named ``<file>:<class>.<method>`` (``get_method_name`` gives the
method, ``construct_and_record_rdzv_event`` the file) and carries no time of its own.
"""

from __future__ import annotations

from tb_monitor.elastic.events.api import RdzvEvent

__all__ = ["KEEP_ALIVE_NAMES", "join_round", "keep_alive_round"]

_FILE = "dynamic_rendezvous.py"
_HANDLER = f"{_FILE}:DynamicRendezvousHandler"
_EXECUTOR = f"{_FILE}:_DistributedRendezvousOpExecutor"
#: The names of a keep-alive round's records, in the order torch records them.
KEEP_ALIVE_NAMES = (f"{_EXECUTOR}._keep_alive", f"{_EXECUTOR}.run", f"{_HANDLER}._keep_alive")


def join_round(
    run_id: str,
    host: str,
    pid: int,
    round_: int,
    rank: int,
    world_size: int,
    *,
    completes: bool = False,
    local_id: int = 0,
) -> list[str]:
    """The JSON of the records node ``host``'s agent makes joining round ``round_`` as ``rank``
    of ``world_size``, in order; ``completes``: it is the last to arrive, and marks the round
    complete before it has joined."""
    node = f"{host}_{pid}_{local_id}"  # _NodeDesc's repr
    steps = [
        (f"{_HANDLER}.next_rendezvous", "RUNNING", None,
         f"The node '{node}' attempts to join the next round of the rendezvous '{run_id}'."),
        (f"{_EXECUTOR}._add_to_participants", "RUNNING", None,
         f"The node '{node}' added itself to the participants of round {round_} of the "
         f"rendezvous '{run_id}'. Pending sync."),
        (f"{_EXECUTOR}.run", "RUNNING", None,
         f"The node '{node}' has successfully synced its local changes with other nodes in "
         f"the rendezvous '{run_id}'."),
    ]  # fmt: skip
    if completes:
        steps.append(
            (f"{_EXECUTOR}._mark_rendezvous_complete", "SUCCEEDED", None,
             f"The node '{node}' marked round {round_} of the rendezvous '{run_id}' as "
             "complete. Pending sync.")
        )  # fmt: skip
    steps.append(
        (f"{_HANDLER}.next_rendezvous", "RUNNING", rank,
         f"The node '{node}' has joined round {round_} of the rendezvous '{run_id}' as rank "
         f"{rank} in a world of size {world_size}.")
    )  # fmt: skip
    return [
        RdzvEvent(name, run_id, message, host, pid, state, rank=r, local_id=local_id).serialize()
        for name, state, r, message in steps
    ]


def keep_alive_round(
    run_id: str, host: str, pid: int, local_id: int = 0, note: str = ""
) -> tuple[str, str, str]:
    """The JSON of the records one keep-alive round of node ``host``'s agent makes, in order.

    ``note`` goes at the end of each message, before its full stop (a synthetic job's
    ``distinct_beats`` counts its heartbeats there); torch's own messages have none.
    """
    node = f"{host}_{pid}_{local_id}"  # _NodeDesc's repr
    messages = (
        f"The node '{node}' updated its keep-alive heartbeat time for the rendezvous "
        f"'{run_id}'{note}. Pending sync.",
        f"The node '{node}' has successfully synced its local changes with other nodes in the "
        f"rendezvous '{run_id}'{note}.",
        f"The node '{node}' has sent a keep-alive heartbeat to the rendezvous '{run_id}'{note}.",
    )
    events = (
        RdzvEvent(name, run_id, message, host, pid, "RUNNING", local_id=local_id).serialize()
        for name, message in zip(KEEP_ALIVE_NAMES, messages, strict=True)
    )
    return tuple(events)  # type: ignore[return-value]

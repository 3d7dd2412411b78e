"""What torch's c10d rendezvous records for one keep-alive, in its own words.

``DynamicRendezvousHandler._keep_alive`` runs the keep-alive operation through its
``_DistributedRendezvousOpExecutor``. The executor records that it updated the node's heartbeat
time (its ``_keep_alive``), then, once it has written the change to the store, that it synced
(its ``run``); last the handler records that the heartbeat was sent (its ``_keep_alive``). Each
is a RUNNING ``RdzvEvent`` named ``<file>:<class>.<method>`` (``get_method_name`` gives the
method, ``construct_and_record_rdzv_event`` the file) and carries no time of its own.
"""

from __future__ import annotations

from tb_monitor.elastic.events.api import RdzvEvent

__all__ = ["KEEP_ALIVE_NAMES", "keep_alive_round"]

_FILE = "dynamic_rendezvous.py"
#: The names of a keep-alive round's records, in the order torch records them.
KEEP_ALIVE_NAMES = (
    f"{_FILE}:_DistributedRendezvousOpExecutor._keep_alive",
    f"{_FILE}:_DistributedRendezvousOpExecutor.run",
    f"{_FILE}:DynamicRendezvousHandler._keep_alive",
)


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

"""Writer processes that record rendezvous keep-alives through the public API, as a node agent
records them, each into its own run: the logdir issue 45 found losing records on a busy machine.

Shared by tests/faults/test_busy_close.py and ``benchmarks/bench_read_events.py``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Sequence

#: 32 nodes per process, a distinct message each, inside ``with tb_monitor.init(logdir)``.
RECORDER = """
    import sys
    import tb_monitor
    from tb_monitor.elastic import events
    from tb_monitor.elastic.events import NodeState

    logdir, count = sys.argv[1], int(sys.argv[2])
    with tb_monitor.init(logdir):
        for i in range(count):
            node = i % 32
            events.construct_and_record_rdzv_event(
                run_id="job",
                message=f"keep-alive {i} of node {node}",
                node_state=NodeState.RUNNING,
                name="DynamicRendezvousHandler._keep_alive",
                hostname=f"node-{node}",
                pid=1000 + node,
            )
"""


def record_in_parallel(
    run_dirs: Sequence[str],
    count: int,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> list[str]:
    """Run one recorder per run directory at once (each command after ``prefix``, such as
    ``nice``), each recording ``count`` keep-alives; their stderr, each checked to have exited 0."""
    procs = [
        subprocess.Popen(
            [*prefix, sys.executable, "-c", textwrap.dedent(RECORDER), run_dir, str(count)],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for run_dir in run_dirs
    ]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * len(procs), errors
    return errors

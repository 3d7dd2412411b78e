"""What a torchelastic event costs the process that records it: ours beside torch's own.

1. ``RdzvEvent.serialize``, the JSON every recorded event becomes: ours against torch's
   (``torch.distributed.elastic.events.api.RdzvEvent``, ``json.dumps(asdict(self))``), on the same
   fields.
2. ``construct_and_record_rdzv_event``, a node agent's rendezvous keep-alive as torchelastic
   records it: ours inside ``tb_monitor.init(logdir)`` (built, logged and handed to the writer
   thread; the calling thread's time) against torch's own into a handler that discards each
   record (torch reads the caller's frames with ``inspect.stack()``; the anchor writes nothing).

Rounds alternate which side runs first; medians of µs per call, and ours / torch's.

    python benchmarks/bench_events.py [--rounds 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable

import tb_monitor
from tb_monitor.elastic import events as ours
from tb_monitor.elastic.events import api as ours_api

FIELDS = {
    "name": "dynamic_rendezvous.py:_keep_alive",
    "run_id": "job",
    "message": "keep-alive 17 of node 3",
    "hostname": "node-3",
    "pid": 1003,
    "node_state": "RUNNING",
    "master_endpoint": "127.0.0.1:29500",
    "rank": 3,
    "local_id": 0,
}


class _Discard(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        record.getMessage()


def _serialize(api) -> Callable[[int], None]:
    event = api.RdzvEvent(**{**FIELDS, "node_state": api.NodeState.RUNNING})

    def run(number: int) -> None:
        for _ in range(number):
            event.serialize()

    return run


def _keep_alives(record: Callable[..., None], state: object) -> Callable[[int], None]:
    def run(number: int) -> None:
        for i in range(number):
            record(run_id="job", message=f"keep-alive {i}", node_state=state, name="_keep_alive")

    return run


def _us_per_call(case: Callable[[int], None], number: int) -> float:
    case(number // 10)  # warm-up
    start = time.perf_counter()
    case(number)
    return (time.perf_counter() - start) / number * 1e6


def _ours_recorded(number: int) -> float:
    with tempfile.TemporaryDirectory() as logdir, tb_monitor.init(logdir):
        record = _keep_alives(ours.construct_and_record_rdzv_event, ours.NodeState.RUNNING)
        return _us_per_call(record, number)


def _torch_recorded(number: int) -> float:
    from torch.distributed.elastic import events as theirs
    from torch.distributed.elastic.events import handlers

    # torch skips the work while the destination's registered handler is a NullHandler.
    registered, discard = handlers._log_handlers["dynamic_rendezvous"], _Discard()
    handlers._log_handlers["dynamic_rendezvous"] = discard
    logger = theirs._get_or_create_logger("dynamic_rendezvous")
    before = logger.handlers[:]
    logger.handlers[:] = [discard]
    logger.setLevel(logging.INFO)
    try:
        record = _keep_alives(theirs.construct_and_record_rdzv_event, theirs.NodeState.RUNNING)
        return _us_per_call(record, number)
    finally:
        logger.handlers[:] = before
        handlers._log_handlers["dynamic_rendezvous"] = registered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=20_000, help="calls per round and side")
    args = parser.parse_args()
    from torch.distributed.elastic.events import api as theirs_api

    cases = {
        "serialize": (
            lambda n: _us_per_call(_serialize(ours_api), n),
            lambda n: _us_per_call(_serialize(theirs_api), n),
        ),
        "record": (_ours_recorded, _torch_recorded),
    }
    print(f"{'case':<12}{'ours µs':>10}{'torch µs':>10}  ours / torch")
    for name, (mine, anchor) in cases.items():
        times: dict[bool, list[float]] = {True: [], False: []}
        for round_ in range(args.rounds):
            for is_ours in (True, False) if round_ % 2 == 0 else (False, True):
                times[is_ours].append((mine if is_ours else anchor)(args.number))
        a, b = statistics.median(times[True]), statistics.median(times[False])
        print(f"{name:<12}{a:>10.2f}{b:>10.2f}  {a / b:.2f}x")


if __name__ == "__main__":
    main()

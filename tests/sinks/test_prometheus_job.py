"""The Prometheus sink's job state: JobReport's answer over the records seen, from what it keeps."""

from __future__ import annotations

import json
import random

import pytest
from conftest import need

from tb_monitor import contract
from tb_monitor.elastic.events.api import Event
from tb_monitor.sinks.base import TimelineRecord
from tb_monitor.sinks.prometheus import JOB_STATES, PrometheusSink, job_state
from tb_monitor.sinks.prometheus_job import JobRecords
from tb_monitor.synthetic import job_records, keep_alive_round

need("prometheus_client")
hypothesis = need("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LABELS = {"node": "n1"}


def job_stream(**options) -> list[TimelineRecord]:
    """A synthetic job's timeline records, each keep-alive the three torch records, as a sink
    gets them, in time order."""
    stream = [
        TimelineRecord(kind, payload, wall_time, contract.decode_record(kind, json.loads(payload)))
        for records in job_records(keep_alive_rounds=True, **options).values()
        for kind, payload, wall_time in records
    ]
    return sorted(stream, key=lambda record: record.wall_time)


def keep_alives(rounds: int, since: float, host: str = "node-000") -> list[TimelineRecord]:
    """``rounds`` keep-alive rounds of one node's agent, one every 5 s from ``since``."""
    payloads = keep_alive_round("job", host, 4000)
    return [
        TimelineRecord(
            contract.RENDEZVOUS,
            p,
            since + 5.0 * i + 0.002 * k,
            contract.decode_record("rendezvous", json.loads(p)),
        )
        for i in range(rounds)
        for k, p in enumerate(payloads)
    ]


def terminated(wall_time: float) -> TimelineRecord:
    """``tb-monitor run``'s verdict when a signal ends its agent (``integrations.torchrun``)."""
    metadata = {"run_id": "job", "hostname": "node-000", "state": "TERMINATED"}
    metadata.update(signal="SIGTERM", exit_code=1, recorded_by="tb_monitor")
    name = "torchelastic.worker.status.TERMINATED"
    payload = Event(name, "AGENT", int(wall_time * 1000), metadata).serialize()
    fields = contract.decode_record(contract.AGENT, json.loads(payload))
    return TimelineRecord(contract.AGENT, payload, wall_time, fields)


def reported(records: list[TimelineRecord]) -> tuple[int, str]:
    """The restarts and state of the JobReport over every one of ``records``, keep-alives and
    all, as the sink names their run."""
    from tb_monitor.analysis.health import report_of

    rows = [
        {**r.fields, "kind": r.kind, "run": "agent-n1", "wall_time": r.wall_time} for r in records
    ]
    report = report_of("", rows)
    return sum(job.restarts for job in report.jobs), job_state(report)


def scraped(sink: PrometheusSink) -> tuple[float, str] | None:
    """The restarts and the one state at 1 the sink's registry serves (None: neither family)."""
    samples = {
        (sample.name, sample.labels.get("state")): sample.value
        for family in sink.registry.collect()
        for sample in family.samples
    }
    if ("tb_monitor_restarts_total", None) not in samples:
        return None
    states = [s for s in JOB_STATES if samples[("tb_monitor_job_state", s)] == 1.0]
    assert len(states) == 1, samples
    return samples[("tb_monitor_restarts_total", None)], states[0]


def fed(records: list[TimelineRecord]) -> PrometheusSink:
    sink = PrometheusSink(labels=LABELS)
    for record in records:
        sink.timeline(record)
    return sink


@settings(max_examples=30)
@given(
    nodes=st.integers(1, 3),
    workers=st.integers(1, 2),
    restarts=st.integers(0, 2),
    fail_last=st.booleans(),
    ended_by_signal=st.booleans(),
    shuffle=st.one_of(st.none(), st.integers(0, 2**16)),
    scrapes=st.lists(st.floats(0.0, 1.0), max_size=6),
)
def test_the_job_state_is_the_reports_over_the_records_seen(
    nodes, workers, restarts, fail_last, ended_by_signal, shuffle, scrapes
):
    """At any scrape, in any order: the report's state over the records seen, its most restarts."""
    stream = job_stream(
        nodes=nodes, workers_per_node=workers, restarts=restarts, fail_last=fail_last
    )
    if ended_by_signal:  # a signal mid-job: later rounds open a job of their own
        stream.append(terminated(stream[len(stream) // 2].wall_time + 0.001))
    if shuffle is not None:
        random.Random(shuffle).shuffle(stream)
    stops = sorted({int(share * len(stream)) for share in scrapes} | {len(stream)})
    sink, most, seen = PrometheusSink(labels=LABELS), 0, 0
    for stop in stops:
        for record in stream[seen:stop]:
            sink.timeline(record)
        seen = stop
        if not any(r.fields["name"].startswith("torchelastic.") for r in stream[:stop]):
            assert scraped(sink) is None
            continue
        restarts_now, state = reported(stream[:stop])
        most = max(most, restarts_now)
        assert scraped(sink) == (most, state)


@pytest.mark.parametrize(
    ("restarts", "fail_last", "state"),
    [(0, False, "succeeded"), (2, False, "succeeded"), (1, True, "failed")],
    ids=["healthy", "restarted", "failing"],
)
def test_restarts_and_state_are_tb_monitor_reports(tmp_path, restarts, fail_last, state):
    """Fed a logdir, the sink serves what ``tb-monitor report`` says, keeping a tenth of it."""
    from tb_monitor.analysis.health import job_report
    from tb_monitor.analysis.sources import timeline_rows
    from tb_monitor.testing import generate_job

    job = generate_job(
        tmp_path / "logs",
        nodes=2,
        workers_per_node=2,
        restarts=restarts,
        fail_last=fail_last,
        keep_alive_rounds=True,
        events=2_000,
    )
    records = JobRecords("agent-n1")
    sink = PrometheusSink(labels=LABELS)
    rows = timeline_rows(job.logdir, "test")
    for row in rows:
        fields = {name: row[name] for name in contract.FIELDS}
        sink.timeline(TimelineRecord(row["kind"], "{}", row["wall_time"], fields))
        records.add(row["kind"], row["wall_time"], fields)
    (report,) = job_report(job.logdir).jobs
    assert scraped(sink) == (report.restarts, state) == (restarts, state)
    assert len(records) < len(rows) / 10


def test_the_collector_works_the_state_out_when_scraped(monkeypatch):
    """The report is made at a scrape, and again only after a record that can change it came."""
    from tb_monitor.analysis import health

    made = []
    report_of = health.report_of
    monkeypatch.setattr(health, "report_of", lambda *a, **k: made.append(1) or report_of(*a, **k))
    stream = job_stream(nodes=2, workers_per_node=2, restarts=1)
    sink = fed(stream)
    assert made == []
    assert scraped(sink) == (1, "succeeded")
    assert scraped(sink) == (1, "succeeded")
    sink.timeline(keep_alives(1, stream[-1].wall_time + 1)[0])
    scraped(sink)
    assert len(made) == 1
    sink.timeline(terminated(stream[-1].wall_time + 2))
    assert scraped(sink) == (1, "terminated")
    assert len(made) == 2


def test_a_report_that_fails_leaves_the_last_state_served_and_warns_once(monkeypatch, caplog):
    """A failing report leaves every series served, the job's as they were, and warns once."""
    from tb_monitor.analysis import health

    stream = job_stream(nodes=1, workers_per_node=2, restarts=1)
    sink = fed(stream[: len(stream) // 2])
    before = scraped(sink)

    def fails(*args, **kwargs):
        raise RuntimeError("unreadable")

    monkeypatch.setattr(health, "report_of", fails)
    for record in stream[len(stream) // 2 :]:
        sink.timeline(record)
        scraped(sink)
    assert scraped(sink) == before
    assert caplog.text.count("stay as they were") == 1


def test_keep_alive_rounds_are_not_kept():
    """All three records of every keep-alive round leave what the sink keeps as it was."""
    records = JobRecords("agent-n1")
    start = job_stream(nodes=1, workers_per_node=2, restarts=0)
    for record in start:
        records.add(record.kind, record.wall_time, record.fields)
    kept, version = len(records), records.version
    for record in keep_alives(1_000, start[-1].wall_time + 5):
        records.add(record.kind, record.wall_time, record.fields)
    assert (len(records), records.version) == (kept, version)


def test_what_is_kept_grows_with_attempts_not_with_time():
    """A job ten times as long keeps as many records; one more attempt keeps a few more."""

    def kept(**options) -> int:
        records = JobRecords("agent-n1")
        for record in job_stream(nodes=2, workers_per_node=2, **options):
            records.add(record.kind, record.wall_time, record.fields)
        return len(records)

    assert kept(restarts=1, events=500) == kept(restarts=1, events=5_000)
    assert kept(restarts=1) < kept(restarts=2) < kept(restarts=1) + 20


def test_a_restart_among_keep_alives_is_counted():
    """A restart after an hour of keep-alive rounds counts once, and the job runs again."""
    stream = [
        r
        for r in job_stream(nodes=1, workers_per_node=2, restarts=1)
        if r.fields["state"] != "SUCCEEDED"
    ]
    second = next(r for r in stream if "has joined round 1" in (r.fields["message"] or ""))
    before = [r for r in stream if r.wall_time < second.wall_time - 1]
    after = [r._replace(wall_time=r.wall_time + 3600) for r in stream if r not in before]
    sink = fed([*before, *keep_alives(720, before[-1].wall_time), *after])
    assert scraped(sink) == (1, "running")


@pytest.mark.torch
def test_torchs_own_keep_alive_round_is_the_synthetic_one_and_is_not_kept(monkeypatch):
    """torch's own keep-alive round is ``keep_alive_round``'s three records; none is kept."""
    need("torch")
    from datetime import datetime, timedelta, timezone

    import torch.distributed as dist
    from torch.distributed.elastic.events import handlers
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    from tb_monitor.sinks.base import TimelineHandler

    got: list[TimelineRecord] = []

    class Captured(TimelineHandler):
        def write(self, record: TimelineRecord) -> None:
            got.append(record)

    monkeypatch.setitem(handlers._log_handlers, "dynamic_rendezvous", Captured())
    rendezvous = dr.DynamicRendezvousHandler.from_backend(
        "job", dist.HashStore(), _StateInMemory(), min_nodes=1, max_nodes=1, local_addr="node-a"
    )
    node, state = rendezvous._this_node, rendezvous._state_holder.state
    state.participants[node] = 0
    state.last_heartbeats[node] = datetime.now(timezone.utc) - timedelta(seconds=10)
    rendezvous._state_holder.mark_dirty()
    rendezvous._state_holder.sync()
    got.clear()
    rendezvous._keep_alive()
    assert [r.payload for r in got] == list(keep_alive_round("job", node.addr, node.pid))
    records = JobRecords("agent-n1")
    for record in got:
        records.add(record.kind, record.wall_time, record.fields)
    assert len(records) == 1  # the earliest: the job exists
    for record in got * 100:
        records.add(record.kind, record.wall_time + 5, record.fields)
    assert len(records) == 1


class _StateInMemory:
    """A rendezvous backend holding the state in memory (torch's ``RendezvousBackend``)."""

    name = "memory"

    def __init__(self) -> None:
        self._state: bytes | None = None
        self._token = 0

    def get_state(self):
        return None if self._state is None else (self._state, self._token)

    def set_state(self, state: bytes, token=None):
        self._state, self._token = state, self._token + 1
        return state, self._token, True

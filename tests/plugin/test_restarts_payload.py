"""The Timeline's restart analysis: every payload carries the attempts and their root causes
(``tb_monitor.analysis.restarts``, the same as ``tb-monitor report``), and collateral ranks are
drawn as STOPPED_BY_RESTART (STOPPED_AT_END in a last attempt)."""

from __future__ import annotations

import numpy as np
import pytest
from plugin_helpers import column, lanes, refreshed_store, small_job
from tensorboard import context as tb_context

from tb_monitor.analysis.health import job_report
from tb_monitor.analysis.restart_marks import STOPPED_AT_END
from tb_monitor.analysis.restarts import STOPPED_BY_RESTART, attempt_dict
from tb_plugin.query import timeline_payload
from tb_plugin.requests import Query


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A synthetic 4x2 job with one failed attempt and a restart."""
    return small_job(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def store(job):
    """A store over the job, refreshed once: every record decoded."""
    return refreshed_store(job.logdir)


@pytest.fixture(scope="module")
def payload(store):
    """The whole job's payload, unfiltered."""
    return timeline_payload(store.snapshot(), Query())


def test_payload_attempts_are_the_job_reports(job, payload):
    """The payload's attempts are those of the logdir's JobReport (``tb-monitor report``'s),
    as ``attempt_dict`` writes them without a traceback."""
    expected = [attempt_dict(a, traceback=False) for a in job_report(job.logdir).attempts]
    got = [
        {
            **a,
            "root_cause": a["root_cause"]
            and {k: v for k, v in a["root_cause"].items() if k not in ("event", "lane")},
        }
        for a in payload["attempts"]
    ]
    assert got == expected


def test_root_cause_points_at_its_event_and_lane(store, payload):
    """The root cause names its record's event id and the position of its lane in the payload."""
    cause = payload["attempts"][0]["root_cause"]
    assert lanes(payload)[cause["lane"]]["label"] == f"rank {cause['rank']}"
    ids = column(payload, "events", "id", "<u4")
    assert cause["event"] in ids.tolist()
    event = store.event(tb_context.RequestContext(), cause["event"])
    assert event["fields"]["state"] == "FAILED" and event["fields"]["rank"] == cause["rank"]


def test_collateral_ranks_are_stopped_by_restart(payload):
    """Collateral ranks' first attempts and their end records are STOPPED_BY_RESTART; the root
    cause's attempt stays FAILED, labelled with its reason."""
    first = payload["attempts"][0]
    stopped = payload["states"].index(STOPPED_BY_RESTART)
    iv_lane = column(payload, "intervals", "lane", "<u4")
    iv_state = column(payload, "intervals", "state", "<u2")
    iv_label = column(payload, "intervals", "label", "<u4")
    iv_t0 = column(payload, "intervals", "t0", "<f8")
    labels = [lane["label"] for lane in lanes(payload)]
    for rank in first["collateral_ranks"]:
        lane = labels.index(f"rank {rank}")
        mine = np.flatnonzero(iv_lane == lane)
        assert iv_state[mine[np.argmin(iv_t0[mine])]] == stopped
    cause_lane = labels.index(f"rank {first['root_cause']['rank']}")
    mine = np.flatnonzero(iv_lane == cause_lane)
    earliest = mine[np.argmin(iv_t0[mine])]
    assert payload["states"][iv_state[earliest]] == "FAILED"
    assert payload["labels"][iv_label[earliest]] == f"attempt 0: {first['root_cause']['reason']}"
    assert STOPPED_BY_RESTART in payload["facets"]["states"]


def test_failed_filter_shows_only_root_causes(store):
    """Filtering on FAILED keeps the root cause's records, not the collateral ranks' ends."""
    filtered = timeline_payload(store.snapshot(), Query(state="FAILED"))
    assert {lane["label"] for lane in lanes(filtered)} == {
        f"rank {a['root_cause']['rank']}" for a in filtered["attempts"] if a["root_cause"]
    }


def test_attempts_follow_the_job_filter(store, job):
    """A job filter naming another job leaves no attempts."""
    assert timeline_payload(store.snapshot(), Query(run_id=job.run_id))["attempts"]
    assert timeline_payload(store.snapshot(), Query(run_id="other"))["attempts"] == []


def test_the_last_attempts_collateral_ranks_stopped_when_the_job_ended(tmp_path):
    """In a job whose last attempt failed, no restart followed: its collateral ranks' attempts
    are drawn STOPPED_AT_END (a state of its own in the legend), the first attempt's
    STOPPED_BY_RESTART; the last attempt says so and loses no time to a restart."""
    job = small_job(tmp_path / "logs", fail_last=True)
    payload = timeline_payload(refreshed_store(job.logdir).snapshot(), Query())
    first, last = payload["attempts"]
    assert (first["collateral_state"], last["collateral_state"]) == (
        STOPPED_BY_RESTART,
        STOPPED_AT_END,
    )
    assert (last["restarted"], last["time_lost_s"]) == (False, None)
    iv_lane = column(payload, "intervals", "lane", "<u4")
    iv_state = column(payload, "intervals", "state", "<u2")
    iv_t0 = column(payload, "intervals", "t0", "<f8")
    labels = [lane["label"] for lane in lanes(payload)]
    for rank in last["collateral_ranks"]:
        mine = np.flatnonzero(iv_lane == labels.index(f"rank {rank}"))
        assert payload["states"][iv_state[mine[np.argmax(iv_t0[mine])]]] == STOPPED_AT_END
    assert STOPPED_AT_END in payload["facets"]["states"]


def test_each_records_count_is_of_the_events_drawn_on_it(store):
    """``rec_count`` counts each record's events as drawn: collateral ends on their stopped
    twins, not on the records they came in."""
    cols = store.snapshot().columns
    drawn = cols.rec[np.arange(len(cols.t))]
    stopped = store._states.values.index(STOPPED_BY_RESTART)
    assert (cols.rec_state[drawn] == stopped).any()
    assert cols.rec_count.tolist() == np.bincount(drawn, minlength=len(cols.rec_count)).tolist()

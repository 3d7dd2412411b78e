"""The data contract: bad records fail with a ValueError naming them; tags keep their names."""

from __future__ import annotations

import json

import pytest

from tb_monitor import contract


@pytest.mark.parametrize(
    ("kind", "record", "field"),
    [
        (contract.AGENT, {"name": "x", "source": "AGENT", "metadata": 5}, "metadata"),
        (contract.WORKER, {"name": "x", "source": "WORKER", "metadata": "text"}, "metadata"),
        (contract.MONITOR, {"name": "x", "data": [1]}, "data"),
    ],
)
def test_a_field_that_is_not_an_object_is_a_valueerror_naming_kind_and_field(kind, record, field):
    """metadata/data that is not a JSON object raises ValueError naming the kind and field."""
    with pytest.raises(ValueError, match=f"{kind!r}: field {field!r} must be a JSON object"):
        contract.decode_record(kind, json.dumps(record))


def test_an_absent_or_null_field_decodes_as_empty():
    """A record without metadata (or with null) decodes with empty metadata."""
    for record in ({"name": "x", "source": "AGENT"}, {"name": "x", "metadata": None}):
        assert contract.decode_record(contract.AGENT, json.dumps(record))["metadata"] == {}


@pytest.mark.parametrize(("role", "rank"), [("default", "3"), ("trainer", "12")])
def test_rank_of_reads_the_run_a_worker_writes(role, rank):
    """The rank comes back from the run name a torchelastic worker's environment gives."""
    env = {"TORCHELASTIC_RUN_ID": "job-1", "RANK": rank, "ROLE_NAME": role}
    assert contract.rank_of(contract.run_name_from_env(env)) == int(rank)
    assert contract.rank_of(contract.agent_run_name("job-1", "node-a", 7)) is None


def test_rank_health_tags_keep_their_on_disk_names():
    """The rank-health scalars keep the tags existing logdirs hold."""
    assert contract.stat_tag(contract.RANK_STEP, "COUNT") == "rank/step_s.count"
    assert contract.stat_tag(contract.RANK_COLLECTIVE, "SUM") == "rank/collective_s.sum"
    assert [contract.beat_tag(n) for n in contract.RANK_BEATS] == [
        "rank/steps.value",
        "rank/entered.value",
        "rank/left.value",
        "rank/in_collective_s.value",
        "rank/since_step_s.value",
        "rank/fr_seq.value",
    ]


def test_an_unknown_heartbeat_is_a_valueerror_naming_it():
    """A heartbeat name outside RANK_BEATS is refused, naming it."""
    with pytest.raises(ValueError, match="'stepz'"):
        contract.beat_tag("stepz")

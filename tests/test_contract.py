"""The data contract: bad records fail with a ValueError naming them; tags keep their names."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_monitor import contract
from tb_monitor.contract import runs
from tb_monitor.contract._binary import from_b64, json_value


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


def test_decoded_records_share_their_metadata_keys():
    """Two decoded worker records hold one copy of each metadata key, nested ones too (a store
    keeps every distinct worker event's metadata), and the same values as their JSON."""
    nested = json.dumps({"rdzv_backend": "c10d", "agent_restarts": 0})
    records = [
        {"name": "x", "source": "WORKER", "metadata": {"group_rank": r, "metadata": nested}}
        for r in (0, 1)
    ]
    first, second = (
        contract.decode_record(contract.WORKER, json.dumps(r))["metadata"] for r in records
    )
    assert first == {"group_rank": 0, "rdzv_backend": "c10d", "agent_restarts": 0}
    assert all(a is b for a, b in zip(first, second, strict=True))


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
        "rank/since_progress_s.value",
        "rank/in_save_s.value",
    ]


def test_an_unknown_heartbeat_is_a_valueerror_naming_it():
    """A heartbeat name outside RANK_BEATS is refused, naming it."""
    with pytest.raises(ValueError, match="'stepz'"):
        contract.beat_tag("stepz")


# Run names from hostile ids: tb_monitor.contract.runs.encode_part

#: Any text, lone surrogates included (an environment's undecodable bytes arrive as them).
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
#: Any text, and the path tricks an attacker would try first.
HOSTILE = st.one_of(st.sampled_from(["..", ".", "/", "/etc", "../..", "\\", "C:\\x"]), ANY_TEXT)


@given(ANY_TEXT)
def test_a_run_name_part_decodes_back_to_its_text(text):
    """encode_part is reversible: decode_part gives back any text, control characters and all."""
    assert runs.decode_part(runs.encode_part(text)) == text


@given(ANY_TEXT, ANY_TEXT)
def test_distinct_ids_get_distinct_directories(a, b):
    """Two different run ids never share a directory."""
    assert (runs.encode_part(a) == runs.encode_part(b)) == (a == b)


@given(run_id=HOSTILE.filter(bool), role=HOSTILE, rank=HOSTILE, host=HOSTILE)
def test_no_run_id_role_or_host_escapes_the_logdir(run_id, role, rank, host):
    """Whatever the run id, role, rank or host ('..', '/', absolute paths), a run is two
    directories below the logdir."""
    env = {"TORCHELASTIC_RUN_ID": run_id, "RANK": rank, "ROLE_NAME": role}
    for run in (runs.run_name_from_env(env), runs.agent_run_name(run_id, host, 7)):
        path = os.path.normpath(os.path.join("/logdir", run))
        assert os.path.dirname(os.path.dirname(path)) == "/logdir" and "\0" not in run


@pytest.mark.parametrize("run_id", ["..", ".", "/etc", "a/../..", "\\x"])
def test_a_dot_dot_or_slash_run_id_writes_inside_the_logdir(run_id, tmp_path):
    """A worker whose run id is '..' or holds '/' writes its events under the logdir."""
    from tb_monitor.sinks import AsyncWriter

    logdir = tmp_path / "logs"
    run = runs.run_name_from_env({"TORCHELASTIC_RUN_ID": run_id, "RANK": "0"})
    with AsyncWriter(logdir / run) as writer:
        writer.add_scalar("x", 1.0)
    assert [p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*tfevents*")] == ["logs"]


def test_non_ascii_run_ids_stay_readable_and_apart():
    """训练-1 and 测试-1 are two runs, named as they are written."""
    names = [
        runs.run_name_from_env({"TORCHELASTIC_RUN_ID": i, "RANK": "0"})
        for i in ("训练-1", "测试-1")
    ]
    assert names == ["训练-1/rank-0", "测试-1/rank-0"]


def test_any_role_keeps_its_rank():
    """A role with spaces or non-ASCII letters still reads back its rank."""
    env = {"TORCHELASTIC_RUN_ID": "job", "RANK": "5", "ROLE_NAME": "数据 loader"}
    assert contract.rank_of(runs.run_name_from_env(env)) == 5


def test_json_value_reads_what_json_loads_reads():
    """The C scanner's fast path gives json.loads' value, whitespace around it included."""
    for text in ['{"t0":1.5,"ix":{}}', ' {"a": [1, 2]} ', "[]", '"x"']:
        assert json_value(text) == json.loads(text)


def test_json_value_says_why_text_is_not_json():
    """Text that is not JSON is json.loads' own ValueError."""
    with pytest.raises(ValueError, match="Extra data"):
        json_value('{"a":1} {"b":2}')


def test_from_b64_rejects_what_is_not_base64():
    """Characters outside the alphabet or bad padding are a ValueError, never skipped."""
    assert from_b64("AAECAw==") == bytes([0, 1, 2, 3])
    for text in ["AAEC Aw==", "AAECAw", "AA*CAw=="]:
        with pytest.raises(ValueError):
            from_b64(text)

"""The C reader of the commonest columnar index reads it as the JSON path does, or leaves it."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import need
from hypothesis import given
from hypothesis import strategies as st

from tb_monitor import contract
from tb_monitor.contract import columnar
from tb_monitor.contract._binary import from_b64
from tb_monitor.elastic.events.api import RdzvEvent
from tb_plugin.columnar_merge import merge_columnar

BEAT = RdzvEvent(
    "DynamicRendezvousHandler._keep_alive", "job", "beat", "node-0", 4000, "RUNNING", local_id=0
).serialize()
STEPS = '"dd_le32":"AQIDBAUGBwg="'  # two uint32 steps


@pytest.fixture
def steps_index():
    """The C ``steps_index`` (skipped locally without a build, a failure in CI)."""
    return need("tb_monitor.contract._columnar_index").steps_index


def _run_index(times: list[float]) -> bytes:
    """The index our writer writes for a run of alike keep-alives at ``times``."""
    return contract.encode_columnar(times, [BEAT], [0] * len(times))[0].encode()


OURS = {
    "a run of keep-alives as our writer writes it": _run_index([1.7e9, 1.7e9 + 5, 1.7e9 + 10]),
    "one keep-alive (no steps)": _run_index([1741000020.4305224]),
    "an exponent": b'{"t0":1.5e9,' + STEPS.encode() + b',"ix":{}}',
    "a negative t0": b'{"t0":-12.25,' + STEPS.encode() + b',"ix":{}}',
    "steps padded twice": b'{"t0":1.5,"dd_le32":"AQIDBA==","ix":{}}',
}
UNUSUAL = {
    "an integer t0 (json.loads's int)": b'{"t0":1700000000,' + STEPS.encode() + b',"ix":{}}',
    "a space": b'{"t0": 1.5,' + STEPS.encode() + b',"ix":{}}',
    "keys in another order": b"{" + STEPS.encode() + b',"t0":1.5,"ix":{}}',
    "a varying column": b'{"t0":1.5,' + STEPS.encode() + b',"ix":{"message":"AAE="}}',
    "shapes by event": b'{"t0":1.5,' + STEPS.encode() + b',"shape_ix":"AAA=","ix":{}}',
    "offsets, not steps": b'{"t0":1.5,"dt_le64":"AAAAAAAAAAA=","ix":{}}',
    "a character outside base64": b'{"t0":1.5,"dd_le32":"AQID*AUG","ix":{}}',
    "an escape in the base64": b'{"t0":1.5,"dd_le32":"\\u0041QIDBAUGBwg=","ix":{}}',
    "padding inside": b'{"t0":1.5,"dd_le32":"AQ==AQID","ix":{}}',
    "three equals signs": b'{"t0":1.5,"dd_le32":"AQIDBAUGB===","ix":{}}',
    "steps that are no whole uint32": b'{"t0":1.5,"dd_le32":"AQID","ix":{}}',
    "a t0 of 2**62 seconds or more": b'{"t0":4.7e18,' + STEPS.encode() + b',"ix":{}}',
    "a t0 past a double": b'{"t0":1e999,' + STEPS.encode() + b',"ix":{}}',
    "NaN": b'{"t0":NaN,' + STEPS.encode() + b',"ix":{}}',
    "a leading zero": b'{"t0":01.5,' + STEPS.encode() + b',"ix":{}}',
    "a cut index": b'{"t0":1.5,' + STEPS.encode(),
    "a long number": b'{"t0":1.' + b"5" * 80 + b"," + STEPS.encode() + b',"ix":{}}',
}


@pytest.mark.parametrize("text", list(OURS.values()), ids=list(OURS))
def test_c_reads_the_commonest_index_as_json_does(steps_index, text):
    """An index our writer writes for a run of alike events reads in C as through JSON."""
    index = json.loads(text)
    assert steps_index(text) == (index["t0"], from_b64(index["dd_le32"]))


@pytest.mark.parametrize("text", list(UNUSUAL.values()), ids=list(UNUSUAL))
def test_c_leaves_any_other_index_to_json(steps_index, text):
    """An index off the commonest form is left to the JSON path, never read otherwise in C."""
    assert steps_index(text) is None


@given(st.floats(min_value=-1e15, max_value=1e15, allow_nan=False), st.binary(max_size=40))
def test_c_reads_any_t0_and_whole_steps_as_json_does(t0, steps):
    """Whatever the t0, C reads whole uint32 steps as JSON and strict base64 do, and leaves
    the others (no whole number of steps) to the JSON path that names the fault."""
    read = need("tb_monitor.contract._columnar_index").steps_index
    index = {"t0": t0, "dd_le32": base64.b64encode(steps).decode(), "ix": {}}
    found = read(json.dumps(index, separators=(",", ":")).encode())
    assert found == (None if len(steps) % 4 else (t0, steps))


def _merged(records):
    """The columns ``records`` decode and merge into, as plain values."""
    found = contract.decode_records(records, columnar=True).columnar
    events = merge_columnar([record for _, record in found])
    plain = {key: getattr(events, key) for key in ("shapes", "values")}
    arrays = ("times", "length", "segment_record", "shape")
    plain.update({key: getattr(events, key).tolist() for key in arrays})
    plain["position"] = {key: ix.tolist() for key, ix in events.position.items()}
    return [position for position, _ in found], plain


def test_a_run_of_records_parses_the_same_with_and_without_c(steps_index, monkeypatch):
    """A run's records merge to the same columns whether C reads them at once (a stepped
    run), C reads their indexes one by one, or JSON does."""
    times = [1.7e9 + 300 * r + 5 * i for r in range(4) for i in range(3)]
    records = [
        (
            contract.encode_columnar(times[r * 3 : r * 3 + 3], [BEAT], [0, 0, 0]),
            0.0,
            True,
        )
        for r in range(4)
    ]
    records = [(tuple(s.encode() for s in strings), t, b) for strings, t, b in records]
    run_positions, in_a_run = _merged(records)
    assert run_positions == [0, 1]  # the first record's values are parsed and checked by JSON
    taken = []
    monkeypatch.setattr(columnar, "_steps_run", None)
    monkeypatch.setattr(
        columnar, "_steps_index", lambda text: taken.append(text) or steps_index(text)
    )
    _, one_by_one = _merged(records)
    assert len(taken) == 3
    monkeypatch.setattr(columnar, "_steps_index", None)
    _, without = _merged(records)
    assert in_a_run == one_by_one == without
    assert in_a_run["times"] == times


def test_a_run_in_c_stops_at_the_first_record_it_leaves_to_python(steps_index):
    """``steps_run`` reads records only while each is ``parse_steps_record``'s case (its values
    parsed and checked in the memo already), and reads none where the first is not one."""
    steps_run = need("tb_monitor.contract._columnar_index").steps_run
    beats = [contract.encode_columnar([1.7e9 + r, 1.7e9 + r + 5], [BEAT], [0, 0]) for r in range(3)]
    records = [(tuple(s.encode() for s in strings), 0.0, True) for strings in beats]
    distinct = ['{"name": "a"}', '{"name": "b"}']
    other = contract.encode_columnar([1.7e9 + 9, 1.7e9 + 10], distinct, [0, 1])  # varies: ix
    records.insert(2, ([s.encode() for s in other], 0.0, True))
    memo = {}
    assert steps_run(records, 0, memo) is None  # no values known yet
    columnar.parse_columnar(json.loads(beats[0][0]), records[0][0][1], memo)  # as JSON reads it
    stop, t0s, counts, steps, values = steps_run(records, 0, memo)
    assert stop == 2 and len(values) == 2 and counts == bytes([2, 0, 0, 0, 0, 0, 0, 0]) * 2
    assert steps_run(records, 2, memo) is None
    assert steps_run(records, 3, memo)[0] == 4
    assert steps_run([(records[0][0], 0.0, 1)], 0, memo) is None  # batched is not True

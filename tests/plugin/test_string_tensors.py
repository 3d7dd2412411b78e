"""The C reader of an Event's string tensors gives protobuf's answer, or leaves the record to it."""

from __future__ import annotations

import pytest
from conftest import need
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2

from tb_monitor import contract
from tb_monitor.sinks import summaries
from tb_plugin import event_files

RENDEZVOUS = contract.timeline_tag(contract.RENDEZVOUS)
WORKER = contract.timeline_tag(contract.WORKER)
NEEDLE = contract.TIMELINE_PREFIX.encode()


@pytest.fixture
def c_reader():
    """The C ``string_tensors`` (skipped locally without a build, a failure in CI)."""
    return need("tb_monitor.logdir._string_tensors").string_tensors


def _event(*values: summary_pb2.Summary.Value, step: int = 7, wall_time: float = 1.5) -> bytes:
    summary = summary_pb2.Summary(value=list(values))
    return event_pb2.Event(wall_time=wall_time, step=step, summary=summary).SerializeToString()


def _head(step: int = 7, wall_time: float = 1.5) -> bytes:
    """An Event's wall time and step, for a summary field written by hand after them."""
    return event_pb2.Event(wall_time=wall_time, step=step).SerializeToString()


def _value(tag: str, *strings: bytes, dims: list[int] | None = None, **tensor) -> bytes:
    shape = {"dim": [{"size": d} for d in dims]} if dims is not None else {}
    proto = tensor_pb2.TensorProto(
        dtype=tensor.pop("dtype", types_pb2.DT_STRING),
        tensor_shape=shape,
        string_val=list(strings),
        **tensor,
    )
    return summary_pb2.Summary.Value(tag=tag, tensor=proto)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, for the records protobuf's own writer never makes."""
    size, out = len(payload), bytearray([number << 3 | 2])
    while size >= 0x80:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    return bytes(out + bytes([size]) + payload)


def _summary_value(**fields) -> bytes:
    return summary_pb2.Summary.Value(**fields).SerializeToString()


def _plain(found):
    """An answer with each value's strings as a tuple (protobuf hands a container back)."""
    if found is None:
        return None
    step, values = found
    return step, [(tag, (tuple(strings), t, batched)) for tag, (strings, t, batched) in values]


WRITTEN = summaries.timeline_batch_summary(contract.RENDEZVOUS, '{"t0":1}', ['{"x":1}'])
OURS = {
    "a batched record as our writer writes it": event_pb2.Event(
        wall_time=2.25, step=3, summary=WRITTEN
    ).SerializeToString(),
    "a version-1 record (a scalar string tensor)": _event(_value(RENDEZVOUS, b'{"a":1}')),
    "two timeline tags and another plugin's": _event(
        _value(RENDEZVOUS, b"i", b"v", dims=[2]),
        summary_pb2.Summary.Value(tag="loss", simple_value=0.5),
        _value(WORKER, b"w"),
    ),
    "a tag of another plugin only": _event(_value("text/notes", b"hello")),
    "a negative step": _event(_value(RENDEZVOUS, b"x"), step=-5),
    "a tensor's value replaced by a later simple_value (a oneof)": _head()
    + _field(
        5, _field(1, _summary_value(tag=RENDEZVOUS) + _field(8, b"\x08\x07") + b"\x15\0\0\0\0")
    ),
}
UNUSUAL = {
    "an empty record": b"",
    "no protobuf at all": b"\xff\xff\xff",
    "a cut record": OURS["a batched record as our writer writes it"][:-3],
    "a float tensor": _event(_value(RENDEZVOUS, dtype=types_pb2.DT_FLOAT, float_val=[1.0])),
    "packed tensor content": _event(
        _value(RENDEZVOUS, dtype=types_pb2.DT_FLOAT, tensor_content=bytes(8), dims=[2])
    ),
    "two dimensions": _event(_value(RENDEZVOUS, b"a", b"b", dims=[1, 2])),
    "a file_version record": event_pb2.Event(
        wall_time=1.0, file_version="brain.Event:2"
    ).SerializeToString(),
    "a tag that is not UTF-8": _head() + _field(5, _field(1, _field(1, b"timeline/\xff"))),
    "a node_name beside the tag": _event(
        summary_pb2.Summary.Value(
            tag=RENDEZVOUS, node_name="n", tensor={"dtype": 7, "string_val": [b"x"]}
        )
    ),
    "a summary given twice (protobuf merges them)": _event(_value(RENDEZVOUS, b"a"))
    + _field(5, _field(1, _summary_value(tag=WORKER, tensor={"dtype": 7, "string_val": [b"w"]}))),
    "a tensor given twice (protobuf merges them)": _head()
    + _field(5, _field(1, _field(8, b"\x08\x07\x42\x01a") + _field(8, b"\x42\x01b"))),
}


@pytest.mark.parametrize("data", list(OURS.values()), ids=list(OURS))
def test_c_reader_takes_a_plain_record_as_protobuf_reads_it(c_reader, data):
    """A record of string tensors as our writers make it is read in C, as protobuf reads it."""
    found = c_reader(data, NEEDLE)
    assert found is not None
    assert _plain(found) == _plain(event_files._parsed_tensors("f", 0, data))


@pytest.mark.parametrize("data", list(UNUSUAL.values()), ids=list(UNUSUAL))
def test_c_reader_leaves_an_unusual_record_to_protobuf(c_reader, data):
    """A record off the common case is left to protobuf, never read otherwise in C."""
    assert c_reader(data, NEEDLE) is None


@pytest.mark.parametrize("data", [*OURS.values(), *UNUSUAL.values()], ids=[*OURS, *UNUSUAL])
def test_records_read_the_same_with_and_without_c(c_reader, monkeypatch, data):
    """Whichever reader takes a record, the timeline keeps the same tensors of it."""
    with_c = _plain(event_files._record_tensors("f", 0, data))
    monkeypatch.setattr(event_files, "_string_tensors", None)
    assert with_c == _plain(event_files._record_tensors("f", 0, data))


def test_merged_summaries_keep_both_values(c_reader):
    """A record protobuf merges (a summary given twice) keeps the values of both."""
    data = UNUSUAL["a summary given twice (protobuf merges them)"]
    _, values = event_files._record_tensors("f", 0, data)
    assert [tag for tag, _ in values] == [RENDEZVOUS, WORKER]


def test_c_reader_rejects_arguments_other_than_bytes(c_reader):
    """The C reader names its signature when given something other than two bytes objects."""
    with pytest.raises(TypeError, match=r"string_tensors\(data: bytes, prefix: bytes\)"):
        c_reader("text", NEEDLE)


def test_a_walk_with_tensors_hands_over_what_string_tensors_reads_and_the_rest_as_data(
    tmp_path, c_reader
):
    """``read_records_from(tensors=...)`` gives each record the C reader takes as its tensors,
    and every other as its data, for protobuf."""
    from tb_monitor.logdir import tfrecord

    written = [OURS["a batched record as our writer writes it"], *UNUSUAL.values()]
    path = tmp_path / "f.tfevents"
    path.write_bytes(b"".join(tfrecord.frame(data) for data in written))
    records, _ = tfrecord.read_records_from(path, tensors=NEEDLE)
    assert [_plain(item) for _, item in records[:1]] == [_plain(c_reader(written[0], NEEDLE))]
    assert [item for _, item in records[1:]] == written[1:]

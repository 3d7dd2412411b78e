"""tb_monitor.logdir.objects: an event file on an object store as deltas sealed into segments."""

from __future__ import annotations

import threading

import pytest

from tb_monitor.logdir.objects import ObjectStream, live_objects


class Store:
    """An in-memory object store that can be made to fail."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.uploaded = 0
        self.down = threading.Event()

    def put(self, name: str, data: bytes) -> None:
        if self.down.is_set():
            raise ConnectionError("store down")
        self.objects[name] = data
        self.uploaded += len(data)

    def delete(self, names: list[str]) -> None:
        for name in names:
            self.objects.pop(name, None)


def _stream(store: Store, **options) -> ObjectStream:
    return ObjectStream(
        "run/ev.tfevents", b"H", store.put, store.delete, upload_secs=3600, **options
    )


def test_each_flush_uploads_only_new_records_as_a_delta():
    """A flush uploads the bytes written since the last one, behind the file's header."""
    store = Store()
    stream = _stream(store)
    stream.write(b"ab")
    assert stream.flush(10)
    stream.write(b"cd")
    assert stream.flush(10)
    assert store.objects == {
        "run/ev.tbmdelta.s000000.d0000": b"Hab",
        "run/ev.tbmdelta.s000000.d0001": b"Hcd",
    }
    stream.close(10)


def test_a_full_segment_replaces_its_deltas_with_one_object():
    """After deltas_per_segment uploads, one segment object holds them all and they are gone."""
    store = Store()
    stream = _stream(store, deltas_per_segment=3)
    for chunk in (b"a", b"b", b"c", b"d"):
        stream.write(chunk)
        assert stream.flush(10)
    stream.close(10)
    assert store.objects == {"run/ev.tfevents.s000000": b"Habc", "run/ev.tfevents.s000001": b"Hd"}


def test_bytes_uploaded_stay_within_twice_the_data():
    """Every byte goes up at most twice (delta, then segment), plus one header per object."""
    store = Store()
    stream = _stream(store, deltas_per_segment=12)
    data = b"x" * 1000
    for _ in range(120):
        stream.write(data)
        stream.flush(10)
    stream.close(10)
    assert len(store.objects) == 10
    assert store.uploaded <= 2 * 120 * len(data) + 2 * 130 * len(b"H")


def test_an_unreachable_store_keeps_the_data_and_uploads_it_when_back():
    """While puts fail nothing is lost within the buffer; the next flush after recovery uploads it."""
    store = Store()
    stream = _stream(store)
    store.down.set()
    stream.write(b"kept")
    assert not stream.flush(0.3)
    store.down.clear()
    assert stream.flush(10)
    stream.close(10)
    assert b"".join(store.objects.values()) == b"Hkept"


def test_an_overflowing_buffer_drops_the_oldest_records_and_counts_them():
    """Beyond max_buffer_bytes the oldest unsent chunks are dropped, counted by their records."""
    store = Store()
    store.down.set()
    stream = _stream(store, max_buffer_bytes=10)
    for _ in range(5):
        stream.write(b"12345", records=2)
    assert stream.dropped == 6
    store.down.clear()
    assert stream.close(10)
    assert b"".join(store.objects.values()) == b"H1234512345"


def test_an_outage_is_reported_once(caplog):
    """Many failed uploads in one outage give one warning, naming the stream."""
    store = Store()
    stream = _stream(store)
    store.down.set()
    for _ in range(3):
        stream.write(b"x")
        stream.flush(0.2)
    store.down.clear()
    stream.close(10)
    failures = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(failures) == 1 and "run/ev.tfevents" in failures[0].getMessage()


@pytest.mark.parametrize(
    ("names", "live"),
    [
        (
            ["f.tbmdelta.s000000.d0001", "f.tbmdelta.s000000.d0000"],
            ["f.tbmdelta.s000000.d0000", "f.tbmdelta.s000000.d0001"],
        ),
        (
            ["f.tfevents.s000000", "f.tbmdelta.s000000.d0000", "f.tbmdelta.s000001.d0000"],
            ["f.tfevents.s000000", "f.tbmdelta.s000001.d0000"],
        ),
        (
            ["g.tfevents", "f.tfevents.s000001", "f.tfevents.s000000"],
            ["f.tfevents.s000000", "f.tfevents.s000001", "g.tfevents"],
        ),
    ],
)
def test_live_objects_read_in_write_order_without_sealed_deltas(names, live):
    """Deltas sort where their segment will; a listing taken while a segment replaces its deltas
    reads each record once."""
    assert live_objects(names) == live


def test_tensorboard_never_lists_a_delta():
    """A delta's name lacks 'tfevents', so TensorBoard reads only segments, which never change."""
    store = Store()
    stream = _stream(store)
    stream.write(b"x")
    stream.flush(10)
    assert [name for name in store.objects if "tfevents" in name] == []
    stream.close(10)
    assert [name for name in store.objects if "tfevents" in name] == ["run/ev.tfevents.s000000"]

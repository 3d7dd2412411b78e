"""TFRecord framing: what TensorBoard reads, and what a crash leaves behind."""

from __future__ import annotations

import logging
import struct

from conftest import need
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
from tensorboardX import crc32c as tbx_crc32c

from tb_monitor.logdir import fs, tfrecord

PAYLOADS = [b"", b"a", b"hello world" * 50, bytes(range(256))]


def _write(path, payloads):
    path.write_bytes(b"".join(tfrecord.frame(p) for p in payloads))
    return path


def test_masked_crc_matches_an_independent_implementation():
    """Our C masked crc32c equals tensorboardX's pure-Python one."""
    for payload in PAYLOADS:
        crc = tbx_crc32c.crc32c(payload)
        expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
        assert tfrecord.masked_crc32c(payload) == expected


def test_records_round_trip(tmp_path):
    """Every framed record is read back unchanged, in order."""
    path = _write(tmp_path / "f.tfevents", PAYLOADS)
    assert list(tfrecord.iter_records(path)) == PAYLOADS


def test_tensorboard_reads_our_framing(tmp_path):
    """TensorBoard's own record reader accepts our records."""
    path = _write(tmp_path / "f.tfevents", PAYLOADS)
    reader = pywrap_tensorflow.PyRecordReader_New(str(path).encode())
    seen = []
    while True:
        try:
            reader.GetNext()
        except Exception:  # its end-of-file signal
            break
        seen.append(reader.record())
    assert seen == PAYLOADS


def test_torn_tail_is_skipped_quietly(tmp_path, caplog):
    """A file cut inside its last record yields every complete record and warns of nothing."""
    path = _write(tmp_path / "f.tfevents", PAYLOADS)
    whole = path.read_bytes()
    for cut in (1, 4, 5, 20):
        path.write_bytes(whole[:-cut])
        with caplog.at_level(logging.WARNING):
            assert list(tfrecord.iter_records(path)) == PAYLOADS[:-1]
    assert not caplog.records


def test_corrupt_data_in_the_middle_skips_that_record(tmp_path, caplog):
    """A record whose data checksum fails is skipped with a warning naming file and offset."""
    path = _write(tmp_path / "f.tfevents", [b"first", b"second", b"third"])
    raw = bytearray(path.read_bytes())
    offset = 12 + 5 + 4  # the second record starts after the first one
    raw[offset + 12] ^= 0xFF  # flip a data byte of "second"
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        assert list(tfrecord.iter_records(path)) == [b"first", b"third"]
    assert f"{path}: corrupt record data at byte {offset}" in caplog.text


def test_corrupt_length_resumes_at_the_next_record(tmp_path, caplog):
    """A record whose length checksum fails is skipped with a warning naming file and offset, and
    reading resumes at the next whole record (TensorBoard's loaders stop there)."""
    path = _write(tmp_path / "f.tfevents", [b"first", b"second", b"third"])
    raw = bytearray(path.read_bytes())
    offset = 12 + 5 + 4
    raw[offset : offset + 8] = struct.pack("<Q", 10**6)
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        assert list(tfrecord.iter_records(path)) == [b"first", b"third"]
    assert f"{path}: corrupt record length at byte {offset}" in caplog.text


def test_event_file_paths_lists_one_run_in_name_order(tmp_path):
    """Only event files directly in the directory, sorted by name, as TensorBoard reads them."""
    for name in ("events.out.tfevents.2.b", "events.out.tfevents.1.a", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "events.out.tfevents.0.c").write_bytes(b"")
    names = [p.rsplit("/", 1)[-1] for p in fs.event_files(str(tmp_path))]
    assert names == ["events.out.tfevents.1.a", "events.out.tfevents.2.b"]


def _damaged(tmp_path):
    """A file of every case the walk meets: sound records with and without the needle, one whose
    data checksum fails, one whose length checksum fails, garbage, and a torn tail."""
    good = [b"keep:%d" % i * (i + 1) for i in range(6)]
    framed = [tfrecord.frame(p) for p in good]
    bad_data = bytearray(tfrecord.frame(b"keep:data"))
    bad_data[14] ^= 0xFF
    bad_length = bytearray(tfrecord.frame(b"keep:length"))
    bad_length[0:8] = struct.pack("<Q", 10**6)
    parts = [framed[0], tfrecord.frame(b"other"), framed[1], bytes(bad_data), framed[2]]
    parts += [bytes(bad_length), framed[3], b"\x00" * 30, framed[4], framed[5][:-3]]
    path = tmp_path / "f.tfevents"
    path.write_bytes(b"".join(parts))
    return path


def _read_both(path, monkeypatch, **kwargs):
    """``read_records_from`` with the C walk and with the Python loop alone, and their reports."""
    need("tb_monitor.logdir._string_tensors")
    found = []
    for walk in (tfrecord._sound_records, None):
        monkeypatch.setattr(tfrecord, "_sound_records", walk)
        report = tfrecord.DamageReport()
        found.append((tfrecord.read_records_from(path, report=report, **kwargs), list(report)))
    return found


def test_the_c_walk_reads_what_the_python_loop_reads_of_a_damaged_file(tmp_path, monkeypatch):
    """Records, where reading stops and the damage counted are the same with the C walk."""
    with_c, python = _read_both(_damaged(tmp_path), monkeypatch)
    assert with_c == python
    (records, _), damage = with_c
    assert [data for _, data in records][:3] == [b"keep:0", b"other", b"keep:1keep:1"]
    assert [d.reason for d in damage] == [tfrecord.DATA_CRC] + [tfrecord.LENGTH_CRC] * 2


def test_the_c_walk_passes_over_records_without_the_needle_as_the_python_loop(
    tmp_path, monkeypatch
):
    """With a needle, both read the same records from the same offsets, and stop alike."""
    path = _damaged(tmp_path)
    whole = path.stat().st_size
    for start in (0, 12 + 6 + 4):  # from the start, and from the second record
        with_c, python = _read_both(path, monkeypatch, needle=b"keep", start=start)
        assert with_c == python
        (records, stop), _ = with_c
        assert b"other" not in [data for _, data in records] and stop < whole

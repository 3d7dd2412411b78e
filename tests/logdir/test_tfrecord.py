"""TFRecord framing: what TensorBoard reads, and what a crash leaves behind."""

from __future__ import annotations

import logging
import struct

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

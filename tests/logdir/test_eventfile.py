"""tb_monitor.logdir.eventfile: one event file, local or on an object store, behind one interface."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

from tb_monitor.logdir import eventfile, fs, tfrecord
from tb_monitor.logdir.objects import ObjectStream


def test_a_failed_local_write_leaves_the_file_at_its_last_whole_record(tmp_path):
    """A write the disk refuses midway (a file size limit) is cut back: no torn record stays."""
    script = """
        import resource, signal, sys
        from tb_monitor.logdir import tfrecord
        from tb_monitor.logdir.eventfile import LocalEventFile
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
        file = LocalEventFile(sys.argv[1], tfrecord.frame(b"header"))
        file.write(tfrecord.frame(b"kept"), 1)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))  # disk full
        try:
            file.write(tfrecord.frame(b"x" * 500), 1)
        except OSError as exc:
            print("refused:", exc.strerror)
        file.close()
    """
    path = tmp_path / "events.out.tfevents.1.tbm"
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "refused: File too large" in result.stdout
    assert list(tfrecord.iter_records(path)) == [b"header", b"kept"]
    assert path.stat().st_size == len(tfrecord.frame(b"header") + tfrecord.frame(b"kept"))


def test_a_local_file_whose_name_was_deleted_says_so(tmp_path):
    """``deleted()`` turns True once the file is unlinked, so the writer starts a new one."""
    file = fs.new_event_file(str(tmp_path / "run"), tfrecord.frame(b"header"))
    assert not file.deleted()
    os.unlink(file.name)
    assert file.deleted()
    file.close()
    assert file.closed


def test_new_event_files_never_share_a_name_and_sort_in_creation_order(tmp_path):
    """Files made one after another in one directory get distinct names in creation order."""
    files = [fs.new_event_file(str(tmp_path), b"") for _ in range(12)]
    names = [file.name for file in files]
    for file in files:
        file.close()
    assert sorted(names) == names and len(set(names)) == 12
    assert fs.event_files(str(tmp_path)) == names


def test_a_new_name_sorts_after_a_later_name_of_its_second():
    """A name that would sort before ``after`` (another host, a larger process id, a clock
    ahead) takes the second after ``after``'s, so it sorts after it."""
    after = "events.out.tfevents.1700000000.zzzz.9999999.000000.tbm"
    name = eventfile.unique_name(1700000000.5, after=after)
    assert name > after and name.startswith("events.out.tfevents.1700000001.")


def test_a_new_name_already_after_keeps_its_own_second():
    """A name that sorts after ``after`` anyway is named by its own clock."""
    after = "events.out.tfevents.1699999990.zzzz.9999999.000000.tbm"
    assert eventfile.unique_name(1700000000.5, after=after).startswith(
        "events.out.tfevents.1700000000."
    )


def test_an_object_file_sync_is_bounded_and_warns_while_the_store_is_down(monkeypatch, caplog):
    """With the store refusing uploads, ``sync`` returns after its deadline and warns with
    the file's name and the bytes still pending; the bytes stay buffered, not dropped."""

    def refuse(name: str, data: bytes) -> None:
        raise ConnectionError("store down")

    monkeypatch.setattr(eventfile, "FLUSH_TIMEOUT_S", 0.2)
    stream = ObjectStream("run/ev.tfevents", b"H", refuse, lambda names: None, upload_secs=3600)
    file = eventfile.ObjectEventFile(stream)
    file.write(b"record", 1)
    with caplog.at_level(logging.WARNING):
        file.sync()
    assert "run/ev.tfevents: 6 bytes not uploaded yet" in caplog.text
    assert file.dropped == 0 and stream.pending_bytes == 6
    file.abandon()  # the test's stream keeps retrying on its daemon thread; never closed

"""Our records through TensorBoard's own loaders: the Python data provider and the Rust server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.parse
import urllib.request

import pytest
from ports import free_port
from tb_loaders import load, timeline_payloads

from tb_monitor import contract
from tb_monitor.sinks.writer import AsyncWriter

RESTART_SCRIPT = """
    import sys
    from tb_monitor.sinks.writer import AsyncWriter
    with AsyncWriter(sys.argv[1]) as writer:
        for i in range(5):
            writer.add_scalar("loss", float(sys.argv[2]) + i)
        writer.add_text("note", "attempt " + sys.argv[2])
"""


def _attempt(run_dir, attempt: int) -> None:
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RESTART_SCRIPT), str(run_dir), str(attempt * 10)],
        check=True,
        timeout=60,
    )


def _get(port: int, route: str, **query: str):
    url = f"http://127.0.0.1:{port}{route}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def rust_server(tmp_path_factory):
    """A real `tensorboard --load_fast=true` over a run written by two successive processes."""
    logdir = tmp_path_factory.mktemp("logs")
    run_dir = logdir / "job" / "rank-0"
    _attempt(run_dir, 1)
    _attempt(run_dir, 2)  # most often in the same second: named after the first all the same
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--load_fast=true", "--logdir", str(logdir),
         "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if _get(port, "/data/plugin/scalars/scalars", run="job/rank-0", tag="loss"):
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tensorboard did not serve: {server.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(30)


@pytest.mark.slow
def test_restart_continues_the_curve_in_the_rust_loader(rust_server):
    """Two attempts on one run read back as one curve of ten points with rising steps."""
    points = _get(rust_server, "/data/plugin/scalars/scalars", run="job/rank-0", tag="loss")
    assert [(step, value) for _, step, value in points] == [
        (i, float(v)) for i, v in enumerate([10, 11, 12, 13, 14, 20, 21, 22, 23, 24])
    ]


@pytest.mark.slow
def test_restart_keeps_every_text_record_in_the_rust_loader(rust_server):
    """Tensor records (text) of both attempts survive the Rust loader too."""
    entries = _get(rust_server, "/data/plugin/text/text", run="job/rank-0", tag="note")
    assert [(e["step"], e["text"]) for e in entries] == [
        (0, "<p>attempt 10</p>"),
        (1, "<p>attempt 20</p>"),
    ]


def _named_a_minute_ahead(run_dir) -> None:
    """Rename the run's files as though a clock a minute ahead had named them: a file after
    which a restart's name, taken from its own clock, would sort."""
    for path in run_dir.iterdir():
        seconds = re.search(r"\.(\d{10})\.", path.name)[1]
        path.rename(path.with_name(path.name.replace(seconds, str(int(seconds) + 60), 1)))


def test_a_restart_named_before_the_file_it_continues_is_read_after_it(logdir):
    """A restart whose name would sort before the attempt before it (the same second on another
    host, a process id that wrapped, a clock behind) takes a name after it: one rising curve."""
    with AsyncWriter(logdir) as writer:
        for i in range(3):
            writer.add_scalar("loss", 10.0 + i)
    _named_a_minute_ahead(logdir)
    with AsyncWriter(logdir) as writer:
        writer.add_scalar("loss", 20.0)
    assert os.path.basename(writer.path) == max(os.listdir(logdir))
    assert load(logdir).scalars()["."]["loss"] == [(0, 10.0), (1, 11.0), (2, 12.0), (3, 20.0)]


def test_every_timeline_kind_reaches_the_plugin_through_the_data_provider(logdir):
    """Each kind of timeline record is handed to the timeline plugin with its payload."""
    payloads = {kind: json.dumps({"name": kind, "n": i}) for i, kind in enumerate(contract.KINDS)}
    with AsyncWriter(logdir) as writer:
        for i, (kind, payload) in enumerate(payloads.items()):
            writer.add_timeline(kind, payload, 100.0 + i)
    tensors = load(logdir).tensors(contract.PLUGIN_NAME)["."]
    assert {
        contract.kind_of_tag(tag): timeline_payloads(points[0])[0]
        for tag, points in tensors.items()
    } == payloads


def test_steps_of_a_restarted_writer_survive_the_python_loader(logdir):
    """The Python loader also reads a restarted run as one rising curve."""
    for attempt in (1, 2):
        _attempt(logdir, attempt)
    assert load(logdir).scalars()["."]["loss"] == [
        (i, float(v)) for i, v in enumerate([10, 11, 12, 13, 14, 20, 21, 22, 23, 24])
    ]


def test_writer_files_are_recognised_as_event_files(logdir):
    """TensorBoard's own event-file test accepts our file names, unique per process."""
    from tensorboard.backend.event_processing import io_wrapper

    with AsyncWriter(logdir) as writer:
        name = os.path.basename(writer.path)
    assert io_wrapper.IsSummaryEventsFile(name)
    assert f".{os.getpid():07d}." in name and name.endswith(".tbm")

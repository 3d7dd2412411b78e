"""A logdir on a store that fails: one line naming the logdir and the cause, exit code 2, within
the deadline of ``TB_MONITOR_REMOTE_TIMEOUT_S``; at ``init()``, which of the three it is."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import need
from object_store import S3_KEY
from ports import free_ports

import tb_monitor
from tb_monitor.cli import export, report
from tb_monitor.logdir import fs

#: Deadlines of a second or two decide what these errors say: never beside another timed test.
pytestmark = pytest.mark.timed

#: Each attempt's deadline in these tests, so a store that never answers fails in about a second.
DEADLINE_S = 0.5


@pytest.fixture(autouse=True)
def fresh_clients():
    """Each test builds its store clients from its own environment (fs caches them by scheme)."""
    fs._remote.cache_clear()
    yield
    fs._remote.cache_clear()


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a hung store or proxy)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for sock in [*held, listener]:
            sock.close()


@pytest.fixture
def store_at(monkeypatch):
    """Point S3 clients at an endpoint, with test credentials and a short deadline."""
    need("s3fs")

    def point(endpoint: str, deadline_s: float = DEADLINE_S) -> str:
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": S3_KEY,
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "TB_MONITOR_REMOTE_TIMEOUT_S": str(deadline_s),
        }.items():
            monkeypatch.setenv(name, value)
        return endpoint

    return point


def closed_port() -> str:
    """An endpoint where nothing listens: connections are refused."""
    (port,) = free_ports(1)
    return f"http://127.0.0.1:{port}"


def one_line(err: str) -> str:
    """The only line of a command's stderr (fails the test if there are more)."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        lambda logdir, tmp: report.main([logdir]),
        lambda logdir, tmp: export.main([logdir, "--format", "jsonl", "-o", str(tmp / "o")]),
    ],
    ids=["report", "export"],
)
def test_an_unreachable_store_is_one_line_and_exit_2(command, store_at, tmp_path, capsys):
    """report/export of a logdir on a closed port: exit 2, one line naming logdir and endpoint."""
    # A refused connection fails at once: the deadline only has to outlast a busy machine's
    # first S3 client start (0.5 s did not, once: "did not answer within").
    endpoint = store_at(closed_port(), deadline_s=30.0)
    code = command("s3://bucket/job", tmp_path)
    line = one_line(capsys.readouterr().err)
    assert code == 2
    assert (
        "s3://bucket/job" in line
        and f"cannot reach the store at {endpoint} (AWS_ENDPOINT_URL)" in line
    )


def test_a_store_that_never_answers_ends_the_report_within_its_deadline(store_at, capsys):
    """A store that accepts and never answers: exit 2 with one line after ~3 deadlines, not
    after minutes of retries."""
    with silent_server() as endpoint:
        store_at(endpoint)
        start = time.monotonic()
        code = report.main(["s3://bucket/job"])
        elapsed = time.monotonic() - start
    line = one_line(capsys.readouterr().err)
    assert code == 2 and f"the store at {endpoint} " in line and "did not answer within" in line
    assert elapsed < 10 * DEADLINE_S


def test_tensorboards_s3_reader_gets_the_same_deadline(store_at, monkeypatch):
    """TensorBoard's own S3 reader (boto3's default session), bounded by bound_boto3_requests,
    gives up on a silent store within the deadline (botocore's default: 60 s a try, 5 tries)."""
    boto3 = need("boto3")
    from tensorboard.compat.tensorflow_stub.io import gfile

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # restored after the test
    with silent_server() as endpoint:
        store_at(endpoint)
        monkeypatch.setattr(gfile.get_filesystem("s3://"), "_s3_endpoint", endpoint)
        fs.bound_boto3_requests()
        start = time.monotonic()
        with pytest.raises(Exception, match="(?i)timeout|timed out"):
            gfile.exists("s3://bucket/job/events.out.tfevents.1")
        elapsed = time.monotonic() - start
    assert elapsed < 10 * DEADLINE_S


def test_a_missing_bucket_at_init_names_the_bucket_and_endpoint(s3_server, s3_bucket):
    """init() on a bucket the store lacks says so, naming the logdir, bucket and endpoint."""
    with pytest.raises(fs.LogdirError) as raised:
        tb_monitor.init("s3://no-such-bucket-here/x")
    message = str(raised.value)
    assert "'s3://no-such-bucket-here/x'" in message and "'no-such-bucket-here'" in message
    assert f"does not exist at {s3_server.endpoint}" in message


def test_refused_credentials_at_init_are_named_as_such(s3_server, s3_bucket, monkeypatch):
    """init() with a secret the store refuses says the credentials were refused, not that the
    bucket is missing."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(fs.LogdirError) as raised:
        tb_monitor.init(f"{s3_bucket}/x")
    message = str(raised.value)
    assert f"'{s3_bucket}/x'" in message
    assert (
        f"the store at {s3_server.endpoint} (AWS_ENDPOINT_URL) refused these credentials" in message
    )
    assert "does not exist" not in message


def test_an_unreachable_endpoint_at_init_is_named_as_such(store_at):
    """init() against a closed port says the store cannot be reached, naming the endpoint."""
    # A refused connection fails at once: the deadline only has to outlast a busy machine's
    # first client (seconds beside other tests), or the words would be "did not answer".
    endpoint = store_at(closed_port(), deadline_s=30.0)
    with pytest.raises(fs.LogdirError) as raised:
        tb_monitor.init("s3://bucket/x")
    message = str(raised.value)
    assert (
        "'s3://bucket/x'" in message
        and f"cannot reach the store at {endpoint} (AWS_ENDPOINT_URL)" in message
    )
    assert "does not exist" not in message

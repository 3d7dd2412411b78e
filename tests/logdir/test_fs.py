"""tb_monitor.logdir.fs: the path layer, for local paths and object-store URLs alike."""

from __future__ import annotations

import pytest
from conftest import need

from tb_monitor.logdir import fs


@pytest.mark.parametrize(
    ("base", "parts", "joined"),
    [
        ("s3://bucket/jobs/", ("exp7", "rank-0"), "s3://bucket/jobs/exp7/rank-0"),
        ("gs://bucket", ("run",), "gs://bucket/run"),
    ],
)
def test_join_uses_slashes_for_urls(base, parts, joined):
    """Joining onto a URL gives a URL, whatever the local separator."""
    assert fs.join(base, *parts) == joined


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_run_names_are_relative_to_the_logdir_url(scheme):
    """A run directory under a URL logdir is named relative to it, '.' for the logdir itself."""
    logdir = f"{scheme}://bucket/jobs/exp7/"
    assert fs.run_name(logdir, f"{scheme}://bucket/jobs/exp7/demo/rank-1") == "demo/rank-1"
    assert fs.run_name(logdir, f"{scheme}://bucket/jobs/exp7") == "."


def test_local_run_names_use_slashes(tmp_path):
    """A local run directory is named relative to the logdir with '/' separators."""
    assert fs.run_name(str(tmp_path), str(tmp_path / "a" / "b")) == "a/b"


def test_tensorboards_s3_endpoint_serves_the_writer_too(monkeypatch):
    """S3_ENDPOINT (TensorBoard's setting) is the endpoint when no AWS_ENDPOINT_URL is set."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("S3_ENDPOINT", "127.0.0.1:9000")
    monkeypatch.setenv("S3_USE_HTTPS", "0")
    assert fs._options("s3")["endpoint_url"] == "http://127.0.0.1:9000"


def test_an_unknown_scheme_names_the_url():
    """A URL whose scheme no filesystem serves is a LogdirError naming the URL and the scheme."""
    with pytest.raises(fs.LogdirError, match=r"logdir 'nope://b/x'.*'nope'"):
        fs.check_logdir("nope://b/x")


def test_a_url_without_a_bucket_is_refused():
    """'s3://' alone names no bucket: a LogdirError saying so."""
    need("s3fs")
    with pytest.raises(fs.LogdirError, match="names no bucket"):
        fs.check_logdir("s3://")


def test_a_missing_local_logdir_is_created(tmp_path):
    """check_logdir creates a local logdir and its parents."""
    fs.check_logdir(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()

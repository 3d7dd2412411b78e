"""tb_monitor.logdir.fs: the path layer, for local paths and object-store URLs alike."""

from __future__ import annotations

import pytest
from conftest import need

from tb_monitor.logdir import fs, stores


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
    assert stores.options("s3")["endpoint_url"] == "http://127.0.0.1:9000"


def test_an_unknown_scheme_names_the_url():
    """A URL whose scheme no filesystem serves is a LogdirError naming the URL and the scheme."""
    need("fsspec")  # without it every URL is refused for want of fsspec, before its scheme
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


MALFORMED_URLS = ["s3:/bucket/run", "s3:bucket", "gs:///x", "s3://", "gs:", "S3:/bucket"]


@pytest.mark.parametrize("url", MALFORMED_URLS)
def test_a_malformed_url_is_an_error_naming_it_not_a_local_dir(url, tmp_path, monkeypatch):
    """A storage scheme with a malformed authority is a LogdirError naming the value; nothing is
    created locally (no directory called 's3:')."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(fs.LogdirError, match=f"logdir '{url}'"):
        fs.check_logdir(fs.join(url, "job", "rank-0"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["runs/a:b", "a:b", "runs/s3:/x"])
def test_a_colon_that_is_not_a_scheme_stays_a_local_path(path, tmp_path, monkeypatch):
    """A colon after the first '/', or after a word no storage serves, is part of a local path."""
    monkeypatch.chdir(tmp_path)
    fs.check_logdir(path)
    assert (tmp_path / path).is_dir()


def test_a_malformed_url_fails_at_init(tmp_path, monkeypatch):
    """init('s3:/bucket/run') raises naming the value instead of writing to ./s3:/bucket/run."""
    import tb_monitor

    monkeypatch.chdir(tmp_path)
    with pytest.raises(fs.LogdirError, match="'s3:/bucket/run' is not a valid s3:// URL"):
        tb_monitor.init("s3:/bucket/run")
    assert list(tmp_path.iterdir()) == []


def test_every_remote_request_has_the_one_deadline(monkeypatch):
    """TB_MONITOR_REMOTE_TIMEOUT_S sets the S3 client's connect and read timeouts and GCS's."""
    monkeypatch.setenv("TB_MONITOR_REMOTE_TIMEOUT_S", "3")
    config = stores.options("s3")["config_kwargs"]
    assert (config["connect_timeout"], config["read_timeout"]) == (3.0, 3.0)
    assert config["retries"]["total_max_attempts"] == 2
    assert stores.options("gs")["requests_timeout"] == 3.0


def test_replace_file_swaps_the_contents_whole(tmp_path):
    """replace_file leaves the new bytes and no temporary file behind."""
    path = str(tmp_path / "steps")
    fs.replace_file(path, b"old")
    fs.replace_file(path, b"new")
    assert fs.listing(str(tmp_path)) == {"steps": 3} and fs.read_bytes(path) == b"new"


def test_read_bytes_starts_at_the_offset(tmp_path):
    """read_bytes(path, start) is the file's tail from that byte on."""
    (tmp_path / "f").write_bytes(b"0123456789")
    assert fs.read_bytes(str(tmp_path / "f"), 7) == b"789"


def test_a_walk_finds_every_directory_holding_event_files_with_their_sizes(tmp_path):
    """The logdir itself and nested directories holding event files are found, each with its
    event files' sizes; other files and directories without event files are not."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"x" * 3)
    (tmp_path / "a" / "b" / "events.out.tfevents.2.host").write_bytes(b"x" * 5)
    (tmp_path / "a" / "notes.txt").write_text("not an event file")
    found = fs.local_event_files(str(tmp_path))
    assert found == {
        ".": (str(tmp_path), {"events.out.tfevents.1.host": 3}),
        "a/b": (str(tmp_path / "a" / "b"), {"events.out.tfevents.2.host": 5}),
    }
    assert [run for run, _ in fs.run_dirs(str(tmp_path))] == [".", "a/b"]


def test_a_walk_follows_links_to_directories_but_not_back_up(tmp_path):
    """A linked run directory is a run under each link's name, as TensorBoard lists it; a
    link back to a directory it is in (the logdir, or any other) is not walked: no loop, no
    run twice."""
    outside, logdir = tmp_path / "outside", tmp_path / "logs"
    (outside / "run").mkdir(parents=True)
    (outside / "run" / "events.out.tfevents.1.host").write_bytes(b"x")
    (logdir / "a").mkdir(parents=True)
    (logdir / "a" / "events.out.tfevents.2.host").write_bytes(b"xy")
    (logdir / "one").symlink_to(outside / "run")
    (logdir / "two").symlink_to(outside / "run")
    (logdir / "a" / "back").symlink_to(logdir / "a")
    (logdir / "a" / "top").symlink_to(logdir)
    found = fs.local_event_files(str(logdir))
    assert {run: sizes for run, (_, sizes) in found.items()} == {
        "a": {"events.out.tfevents.2.host": 2},
        "one": {"events.out.tfevents.1.host": 1},
        "two": {"events.out.tfevents.1.host": 1},
    }


def test_a_walk_of_a_missing_logdir_finds_nothing(tmp_path):
    """A logdir that is not there (yet) holds no event files: no error."""
    assert fs.local_event_files(str(tmp_path / "not-yet")) == {}

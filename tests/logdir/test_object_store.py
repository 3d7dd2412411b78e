"""Smoke tests of the object-store fixtures: real clients reach the local S3 and GCS servers."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from conftest import need

PAYLOAD = b"brain.Event:2 is not parsed here, only moved\n" * 100


def test_s3fs_puts_lists_gets_and_deletes_an_object(s3_server, s3_bucket):
    """s3fs reaches the bucket from the environment alone and from storage_options alike."""
    fsspec = need("fsspec")
    need("s3fs")
    fs, _ = fsspec.core.url_to_fs(s3_bucket, skip_instance_cache=True)
    path = f"{s3_bucket}/run/events.out.tfevents.1.host"
    fs.pipe(path, PAYLOAD)
    explicit = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    assert explicit.ls(f"{s3_bucket}/run", detail=False) == [path.removeprefix("s3://")]
    assert fs.cat(path) == PAYLOAD
    fs.rm(path)
    explicit.invalidate_cache()
    assert not explicit.exists(path)


def test_tensorboard_gfile_lists_and_reads_an_s3_object(s3_bucket):
    """TensorBoard's own S3 reader (boto3) finds and reads an object below the bucket's root."""
    need("boto3")
    from tensorboard.compat.tensorflow_stub.io import gfile

    path = f"{s3_bucket}/jobs/run/a.tfevents"
    need("s3fs").S3FileSystem(skip_instance_cache=True).pipe(path, PAYLOAD)
    # Not the bucket itself: TensorBoard's S3 paths need a key prefix ("s3://b" raises ValueError).
    assert gfile.isdir(f"{s3_bucket}/jobs/run")
    assert gfile.listdir(f"{s3_bucket}/jobs") == ["run"]
    assert gfile.glob(f"{s3_bucket}/jobs/run/*") == [path]
    assert gfile.stat(path).length == len(PAYLOAD)
    with gfile.GFile(path, "rb") as f:
        assert f.read() == PAYLOAD


def test_a_child_process_reaches_s3_with_child_env_and_is_refused_without_credentials(
    s3_server, s3_bucket
):
    """The server enforces its credentials, so a child that did not get them fails loudly."""
    need("boto3")
    bucket = s3_bucket.removeprefix("s3://")
    code = f"import boto3; print(boto3.client('s3').list_objects_v2(Bucket={bucket!r})['KeyCount'])"
    ok = subprocess.run(
        [sys.executable, "-c", code], env=s3_server.child_env(), capture_output=True
    )
    assert ok.stdout.strip() == b"0", ok.stderr.decode()
    env = s3_server.child_env() | {"AWS_ACCESS_KEY_ID": "someone-else"}
    refused = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert refused.returncode != 0 and b"InvalidAccessKeyId" in refused.stderr


def test_objects_survive_a_stop_and_start_on_the_same_endpoint(s3_server, s3_bucket):
    """stop()/start() is an outage, not a new server: same endpoint, same buckets and objects."""
    s3fs = need("s3fs")
    s3fs.S3FileSystem(skip_instance_cache=True).pipe(f"{s3_bucket}/kept", b"before the outage")
    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    s3_server.stop()
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        s3_server.start()
    fresh = s3fs.S3FileSystem(skip_instance_cache=True, **s3_server.storage_options)
    assert fresh.cat(f"{s3_bucket}/kept") == b"before the outage"


def test_gcsfs_puts_lists_gets_and_deletes_an_object(gcs_server, gcs_bucket):
    """gcsfs reaches the emulator through STORAGE_EMULATOR_HOST and through storage_options."""
    fsspec = need("fsspec")
    need("gcsfs")
    fs, _ = fsspec.core.url_to_fs(gcs_bucket, skip_instance_cache=True)
    path = f"{gcs_bucket}/run/events.out.tfevents.1.host"
    fs.pipe(path, PAYLOAD)
    explicit = fsspec.filesystem("gs", skip_instance_cache=True, **gcs_server.storage_options)
    assert explicit.ls(f"{gcs_bucket}/run", detail=False) == [path.removeprefix("gs://")]
    assert fs.cat(path) == PAYLOAD
    fs.rm(path)
    explicit.invalidate_cache()
    assert not explicit.exists(path)


def test_tensorboard_gfile_lists_and_reads_a_gcs_object(gcs_bucket):
    """TensorBoard's gfile reads gs:// through its fsspec fallback, i.e. gcsfs."""
    need("gcsfs")
    from tensorboard.compat.tensorflow_stub.io import gfile

    path = f"{gcs_bucket}/jobs/run/a.tfevents"
    need("fsspec").filesystem("gs", skip_instance_cache=True).pipe(path, PAYLOAD)
    assert gfile.isdir(f"{gcs_bucket}/jobs/run")
    assert gfile.listdir(f"{gcs_bucket}/jobs") == ["run"]
    assert gfile.glob(f"{gcs_bucket}/jobs/run/*") == [path]
    with gfile.GFile(path, "rb") as f:
        assert f.read() == PAYLOAD

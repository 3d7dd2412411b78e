"""Where a logdir's bytes live: the one module that joins paths, checks schemes and lists runs.

Local paths go to the operating system directly. A URL (``s3://``, ``gs://``, any scheme fsspec
knows) goes to an object store through fsspec (``s3fs``, ``gcsfs``: the ``remote`` extra), where a
writer's event file becomes deltas and segments (``tb_monitor.logdir.objects``). Writers, readers,
exports and the plugin all reach storage through the functions here, so a new backend is a change
to this module alone.

Credentials and endpoints come the standard way and never from us: the AWS variables and config
files (``AWS_ENDPOINT_URL`` included), ``STORAGE_EMULATOR_HOST`` and the Google credentials for GCS,
fsspec's own configuration (``FSSPEC_S3_*`` variables, ``~/.config/fsspec``), and TensorBoard's
``S3_ENDPOINT``, honoured so that one setting serves both the writer and ``tensorboard --logdir``.

Knobs of the object-store writer (environment, so torchrun's workers inherit them):
``TB_MONITOR_UPLOAD_SECS`` (5: seconds between uploads, so data is visible within seconds),
``TB_MONITOR_SEGMENT_DELTAS`` (12: uploads per segment object, one object a minute),
``TB_MONITOR_UPLOAD_BUFFER_MB`` (64: unsent bytes kept while the store is unreachable).
"""

from __future__ import annotations

import functools
import os
import posixpath
import time
from collections.abc import Iterator
from typing import IO, Any

from tb_monitor import _env
from tb_monitor.logdir import eventfile, objects
from tb_monitor.logdir.eventfile import EventFile

__all__ = [
    "EVENT_FILE_MARK",
    "LogdirError",
    "absolute",
    "check_logdir",
    "event_files",
    "is_event_file",
    "is_remote",
    "isdir",
    "join",
    "makedirs",
    "new_event_file",
    "open_file",
    "run_dirs",
    "run_name",
    "same_dir",
]

#: What TensorBoard looks for in a file name to treat it as an event file.
EVENT_FILE_MARK = "tfevents"


class LogdirError(ValueError):
    """A logdir that cannot be used: the message names it and says what to do."""


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location (``gs://``, ``s3://``, any URL with a scheme)."""
    return "://" in path


def is_event_file(name: str) -> bool:
    """Whether a file name is one TensorBoard reads as an event file."""
    return EVENT_FILE_MARK in name


def absolute(path: str) -> str:
    """``path`` made absolute, for processes that may run in another directory (URLs already are)."""
    return path if is_remote(path) else os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with the separator of the place ``base`` names."""
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


@functools.lru_cache(maxsize=16)
def _remote(scheme: str) -> Any:
    """The fsspec filesystem serving ``scheme``, configured from the environment."""
    try:
        import fsspec
    except ImportError:
        raise LogdirError(
            f"{scheme}:// logdirs need fsspec: pip install 'tb-monitor[remote]'"
        ) from None
    try:
        cls = fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise LogdirError(
            f"unknown storage scheme {scheme!r}; use a local path, s3:// or gs://"
        ) from None
    except ImportError as exc:
        raise LogdirError(
            f"{scheme}:// logdirs need a client library ({exc}): pip install 'tb-monitor[remote]'"
        ) from None
    return cls(**_options(scheme))


def _options(scheme: str) -> dict[str, Any]:
    """Storage options beyond fsspec's own configuration: TensorBoard's S3 settings, timeouts."""
    options: dict[str, Any] = {"skip_instance_cache": True}
    if scheme in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        endpoint = endpoint or os.environ.get("S3_ENDPOINT")  # TensorBoard's name
        if endpoint:
            if "://" not in endpoint:
                https = _env.flag("S3_USE_HTTPS", True)
                endpoint = f"{'https' if https else 'http'}://{endpoint}"
            options["endpoint_url"] = endpoint
        # A store that does not answer fails an attempt in seconds; the uploader retries.
        options["config_kwargs"] = {
            "connect_timeout": 5,
            "read_timeout": 20,
            "retries": {"max_attempts": 2},
        }
    return options


def _split(url: str) -> tuple[Any, str]:
    scheme, _, path = url.partition("://")
    try:
        return _remote(scheme), path.rstrip("/")
    except LogdirError as exc:
        raise LogdirError(f"logdir {url!r}: {exc}") from None


def _url(scheme: str, path: str) -> str:
    return f"{scheme}://{path}"


def open_file(path: str) -> IO[bytes]:
    """Open an event file to read (files are written through ``new_event_file``)."""
    if is_remote(path):
        filesystem, key = _split(path)
        return filesystem.open(key, "rb")
    return open(path, "rb")


def new_event_file(run_dir: str, header: bytes) -> EventFile:
    """A new event file of this process in ``run_dir`` (created first, if it was deleted),
    starting with ``header``: a local file, or on an object store a stream of objects."""
    makedirs(run_dir)
    while True:
        path = join(run_dir, eventfile.unique_name(time.time()))
        try:
            return _create_event_file(path, header)
        except FileExistsError:
            continue


def _create_event_file(path: str, header: bytes) -> EventFile:
    if not is_remote(path):
        return eventfile.LocalEventFile(path, header)
    filesystem, key = _split(path)

    def put(name: str, data: bytes) -> None:
        filesystem.pipe_file(name, data)

    def delete(names: list[str]) -> None:
        filesystem.rm(names)

    stream = objects.ObjectStream(
        key,
        header,
        put,
        delete,
        upload_secs=float(os.environ.get("TB_MONITOR_UPLOAD_SECS", 5.0)),
        deltas_per_segment=int(os.environ.get("TB_MONITOR_SEGMENT_DELTAS", 12)),
        max_buffer_bytes=int(float(os.environ.get("TB_MONITOR_UPLOAD_BUFFER_MB", 64)) * (1 << 20)),
        name=path,
    )
    return eventfile.ObjectEventFile(stream)


def makedirs(path: str) -> None:
    """Create ``path`` and its parents if they do not exist (object stores need none)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def check_logdir(path: str) -> None:
    """Fail now, naming ``path``, when a logdir cannot be written: before training starts.

    Locally, the directory is created. On an object store the bucket must exist and be
    reachable with the credentials at hand.
    """
    if not is_remote(path):
        makedirs(path)
        return
    filesystem, key = _split(path)
    bucket = key.split("/", 1)[0]
    if not bucket:
        raise LogdirError(f"logdir {path!r} names no bucket")
    try:
        exists = filesystem.exists(bucket)
    except PermissionError as exc:
        raise LogdirError(
            f"logdir {path!r}: access to bucket {bucket!r} denied ({exc}); check the credentials"
        ) from None
    except Exception as exc:
        raise LogdirError(
            f"logdir {path!r}: cannot reach the object store ({type(exc).__name__}: {exc}); "
            "check the endpoint (AWS_ENDPOINT_URL / S3_ENDPOINT / STORAGE_EMULATOR_HOST) and "
            "the credentials"
        ) from None
    if not exists:
        raise LogdirError(
            f"logdir {path!r}: bucket {bucket!r} does not exist (or these credentials cannot "
            "see it); create it first"
        )


def isdir(path: str) -> bool:
    """Whether ``path`` is an existing directory (a prefix holding objects, remotely)."""
    if is_remote(path):
        filesystem, key = _split(path)
        filesystem.invalidate_cache()
        return filesystem.isdir(key)
    return os.path.isdir(path)


def event_files(run_dir: str) -> list[str]:
    """Event files directly in ``run_dir`` (one run), sorted by name as TensorBoard reads them.

    On an object store, the deltas of the open segments are included, in write order, and
    deltas already sealed into a segment are left out (see ``objects``).
    """
    if is_remote(run_dir):
        filesystem, key = _split(run_dir)
        filesystem.invalidate_cache()
        try:
            entries = filesystem.ls(key, detail=True)
        except FileNotFoundError:
            entries = []
        names = [posixpath.basename(e["name"]) for e in entries if e.get("type") == "file"]
        live = objects.live_objects(n for n in names if is_event_file(n) or objects.is_delta(n))
        return [join(run_dir, name) for name in live]
    try:
        names = sorted(e.name for e in os.scandir(run_dir) if e.is_file())
    except FileNotFoundError:
        names = []
    return [join(run_dir, name) for name in names if is_event_file(name)]


def run_dirs(logdir: str) -> Iterator[tuple[str, str]]:
    """``(run, directory)`` for every directory under ``logdir`` holding event files, sorted.

    Raises ``FileNotFoundError`` naming ``logdir`` when it is not a directory.
    """
    if is_remote(logdir):
        logdir = logdir.rstrip("/")
        scheme = logdir.partition("://")[0]
        filesystem, key = _split(logdir)
        filesystem.invalidate_cache()
        files = filesystem.find(key)
        if not files and not filesystem.isdir(key):
            raise FileNotFoundError(f"logdir {logdir!r} does not exist or holds no objects")
        directories = {
            posixpath.dirname(name)
            for name in files
            if is_event_file(posixpath.basename(name)) or objects.is_delta(posixpath.basename(name))
        }
        found = [(run_name(logdir, _url(scheme, d)), _url(scheme, d)) for d in directories]
    elif os.path.isdir(logdir):
        found = [
            (run_name(logdir, directory), directory)
            for directory, _, files in os.walk(logdir)
            if any(is_event_file(name) for name in files)
        ]
    else:
        raise FileNotFoundError(f"logdir {logdir!r} does not exist or is not a directory")
    yield from sorted(found)


def run_name(logdir: str, directory: str) -> str:
    """A run directory relative to the logdir, with ``/`` separators; ``"."`` for the logdir."""
    if is_remote(logdir):
        return directory.rstrip("/")[len(logdir.rstrip("/")) :].lstrip("/") or "."
    return os.path.relpath(directory, logdir).replace(os.sep, "/")


def same_dir(a: str, b: str) -> bool:
    """Whether two run directories are the same one (local paths resolved, URIs compared)."""
    if is_remote(a) or is_remote(b):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)

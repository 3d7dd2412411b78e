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

Every request to a store has one deadline, and a failed read is one line naming the URL, the
endpoint and the cause (``StoreError``): ``logdir.stores``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import posixpath
import re
import time
from collections.abc import Iterator
from typing import IO, Any

from tb_monitor.logdir import eventfile, objects, stores
from tb_monitor.logdir.eventfile import EventFile
from tb_monitor.logdir.stores import LogdirError, StoreError, bound_boto3_requests

__all__ = [
    "EVENT_FILE_MARK",
    "LogdirError",
    "StoreError",
    "absolute",
    "bound_boto3_requests",
    "check_logdir",
    "event_files",
    "is_event_file",
    "is_remote",
    "isdir",
    "join",
    "listing",
    "local_event_files",
    "makedirs",
    "new_event_file",
    "open_file",
    "read_bytes",
    "replace_file",
    "run_dirs",
    "run_name",
    "same_dir",
]

#: What TensorBoard looks for in a file name to treat it as an event file.
EVENT_FILE_MARK = "tfevents"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
#: Object-store schemes: a path starting with one of these and a colon must be a whole URL.
_STORE_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "hdfs", "webhdfs")


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location (``gs://``, ``s3://``, any URL with a scheme).

    Raises ``LogdirError`` naming ``path`` where it starts like a URL of a storage scheme but is
    not one (``s3:/bucket``, ``s3:bucket``, ``gs:///x``, ``s3://``): it must never become a local
    directory called ``s3:``. A colon after the first ``/`` (``runs/a:b``) is a local path.
    """
    match = _SCHEME.match(path)
    if match is None:
        return False
    scheme, rest = match[1], path[match.end() :]
    if rest.startswith("//"):
        if not rest[2:].split("/", 1)[0]:
            raise LogdirError(f"logdir {path!r} names no bucket: write {scheme}://BUCKET/PATH")
        return True
    if scheme.lower() in _STORE_SCHEMES:
        raise LogdirError(
            f"logdir {path!r} is not a valid {scheme}:// URL: write {scheme}://BUCKET/PATH "
            f"(or ./{path} for a local directory)"
        )
    return False


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
    filesystem = cls(**stores.options(scheme))
    if scheme in ("s3", "s3a"):  # botocore retries once (_botocore_config): s3fs's own retries
        filesystem.retries = 1  # (5 by default) would multiply the time a dead store takes
    return filesystem


# A forked child must not use its parent's object-store client (fsspec's async filesystems
# refuse: "This class is not fork-safe", and the child's uploads are lost): it makes its own.
os.register_at_fork(after_in_child=_remote.cache_clear)


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
    return io.BytesIO(read_bytes(path)) if is_remote(path) else open(path, "rb")


def read_bytes(path: str, start: int = 0, end: int | None = None) -> bytes:
    """The bytes of a file from ``start`` on (up to ``end``, when given): remotely one (ranged)
    request, under the deadline."""
    if not is_remote(path):
        with open(path, "rb") as file:
            file.seek(start)
            return file.read() if end is None else file.read(max(0, end - start))
    filesystem, key = _split(path)
    with stores.reading(path):
        return stores.call(filesystem, filesystem.cat_file, key, start=start or None, end=end)


def replace_file(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` whole: a reader sees the old contents or the new, and a
    failed local write (a full disk) leaves no partial file."""
    if is_remote(path):
        filesystem, key = _split(path)
        stores.call(filesystem, filesystem.pipe_file, key, data)
        return
    temporary = f"{path}.tmp"
    try:
        with open(temporary, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def new_event_file(run_dir: str, header: bytes, suffix: str = "", after: str = "") -> EventFile:
    """A new event file of this process in ``run_dir`` (created first, if it was deleted),
    starting with ``header``, its name ending with ``suffix`` and sorting after ``after``: a
    local file, or on an object store a stream of objects."""
    makedirs(run_dir)
    while True:
        path = join(run_dir, eventfile.unique_name(time.time(), suffix, after))
        try:
            return _create_event_file(path, header)
        except FileExistsError:
            continue


def _create_event_file(path: str, header: bytes) -> EventFile:
    if not is_remote(path):
        return eventfile.LocalEventFile(path, header)
    filesystem, key = _split(path)

    def put(name: str, data: bytes) -> None:
        stores.call(filesystem, filesystem.pipe_file, name, data)

    def delete(names: list[str]) -> None:
        stores.call(filesystem, filesystem.rm, names)

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
    reachable with the credentials at hand; the error says which of these it is not, naming
    the endpoint.
    """
    if not is_remote(path):
        makedirs(path)
        return
    filesystem, key = _split(path)
    bucket = key.split("/", 1)[0]  # never empty: is_remote refused "s3://"
    try:
        stores.call(filesystem, filesystem.info, bucket)
    except FileNotFoundError:
        raise LogdirError(
            f"logdir {path!r}: bucket {bucket!r} does not exist at {stores.endpoint_of(path)}; "
            "create it first"
        ) from None
    except Exception as exc:
        raise LogdirError(f"logdir {path!r}: {stores.cause(path, exc)}") from None


def isdir(path: str) -> bool:
    """Whether ``path`` is an existing directory (a prefix holding objects, remotely)."""
    if is_remote(path):
        filesystem, key = _split(path)
        filesystem.invalidate_cache()
        with stores.reading(path):
            return bool(stores.call(filesystem, filesystem.isdir, key))
    return os.path.isdir(path)


def listing(run_dir: str) -> dict[str, int]:
    """Every file directly in ``run_dir`` with its size; ``{}`` where it does not exist.
    Remotely one listing (its pages, as many as the run is long, each request bounded)."""
    if not is_remote(run_dir):
        try:
            with os.scandir(run_dir) as entries:
                return {e.name: e.stat().st_size for e in entries if e.is_file()}
        except FileNotFoundError:
            return {}
    filesystem, key = _split(run_dir)
    filesystem.invalidate_cache()
    try:
        with stores.reading(run_dir):
            entries = filesystem.ls(key, detail=True)
    except FileNotFoundError:
        return {}
    files = (e for e in entries if e.get("type") == "file")
    return {posixpath.basename(e["name"]): int(e.get("size") or 0) for e in files}


def event_files(run_dir: str) -> list[str]:
    """Event files directly in ``run_dir`` (one run), sorted by name as TensorBoard reads them.

    On an object store, the deltas of the open segments are included, in write order, and
    deltas already sealed into a segment are left out (see ``objects``).
    """
    names = listing(run_dir)
    if is_remote(run_dir):
        live = objects.live_objects(n for n in names if is_event_file(n) or objects.is_delta(n))
    else:
        live = sorted(n for n in names if is_event_file(n))
    return [join(run_dir, name) for name in live]


def run_dirs(logdir: str) -> Iterator[tuple[str, str]]:
    """``(run, directory)`` for every directory under ``logdir`` holding event files, sorted.

    Raises ``FileNotFoundError`` naming ``logdir`` when it is not a directory.
    """
    if is_remote(logdir):
        logdir = logdir.rstrip("/")
        scheme = logdir.partition("://")[0]
        filesystem, key = _split(logdir)
        filesystem.invalidate_cache()
        with stores.reading(
            logdir
        ):  # one request under the deadline first: a dead store fails here
            found_dir = stores.call(filesystem, filesystem.isdir, key)
            files = filesystem.find(key) if found_dir else []  # pages: each request bounded
        if not found_dir:
            raise FileNotFoundError(f"logdir {logdir!r} does not exist or holds no objects")
        directories = {
            posixpath.dirname(name)
            for name in files
            if is_event_file(posixpath.basename(name)) or objects.is_delta(posixpath.basename(name))
        }
        found = [(run_name(logdir, _url(scheme, d)), _url(scheme, d)) for d in directories]
    elif os.path.isdir(logdir):
        found = [(run, directory) for run, (directory, _) in local_event_files(logdir).items()]
    else:
        raise FileNotFoundError(f"logdir {logdir!r} does not exist or is not a directory")
    yield from sorted(found)


def local_event_files(logdir: str) -> dict[str, tuple[str, dict[str, int]]]:
    """Every run of the local ``logdir``: each directory under it (itself included) holding
    event files, by its run name (``run_name``), with its path and its event files' sizes.
    One walk of the tree. Links to directories are followed,
    as TensorBoard does, but not one back to a directory it is in (a loop); what vanishes
    meanwhile is passed over, and a logdir that is not there holds none."""
    found: dict[str, tuple[str, dict[str, int]]] = {}
    # Each directory with its real path: a link's target, else its parent's and its name.
    pending = [(logdir, ".", os.path.realpath(logdir))]
    while pending:
        directory, run, real = pending.pop()
        sizes: dict[str, int] = {}
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    with contextlib.suppress(OSError):  # gone since it was listed
                        if entry.is_dir():
                            below = os.path.join(real, entry.name)
                            if entry.is_symlink():
                                below = os.path.realpath(entry.path)
                                if f"{real}{os.sep}".startswith(f"{below.rstrip(os.sep)}{os.sep}"):
                                    continue  # a loop: it leads back up to where it is
                            name = entry.name if run == "." else f"{run}/{entry.name}"
                            pending.append((entry.path, name, below))
                        elif is_event_file(entry.name) and entry.is_file():
                            sizes[entry.name] = entry.stat().st_size
        except OSError:  # gone, or not ours to read
            continue
        if sizes:
            found[run] = (directory, sizes)
    return found


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

"""Where a logdir's bytes live: the one module that joins paths, checks schemes and lists runs.

Local paths go to the operating system directly. A path with a scheme (``gs://``, ``s3://``)
goes to a remote filesystem. Writers, readers, exports and the plugin all reach storage through
the functions here, so a new backend is a change to this module alone.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from typing import IO

__all__ = [
    "EVENT_FILE_MARK",
    "event_files",
    "is_event_file",
    "is_remote",
    "isdir",
    "join",
    "makedirs",
    "open_file",
    "run_dirs",
    "run_name",
]

#: What TensorBoard looks for in a file name to treat it as an event file.
EVENT_FILE_MARK = "tfevents"


def is_remote(path: str) -> bool:
    """Whether ``path`` names a remote location (``gs://``, ``s3://``, any URL with a scheme)."""
    return "://" in path


def is_event_file(name: str) -> bool:
    """Whether a file name is one TensorBoard reads as an event file."""
    return EVENT_FILE_MARK in name


def join(base: str, *parts: str) -> str:
    """``base`` and ``parts`` joined with the separator of the place ``base`` names."""
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


def _gfile():
    from tensorboard.compat.tensorflow_stub.io import gfile

    return gfile


def open_file(path: str, mode: str) -> IO[bytes]:
    """Open an event file: ``"rb"`` to read, ``"xb"`` to create (never clobbering) and write.

    Local files are opened unbuffered for writing: the writer batches itself, and a forked child
    must never flush a parent's buffered bytes into the parent's file.
    """
    if is_remote(path):
        return _gfile().GFile(path, mode.replace("x", "w"))
    return open(path, mode, buffering=0 if "x" in mode else -1)


def makedirs(path: str) -> None:
    """Create ``path`` and its parents if they do not exist."""
    if is_remote(path):
        gfile = _gfile()
        if not gfile.exists(path):
            gfile.makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def isdir(path: str) -> bool:
    """Whether ``path`` is an existing directory (a prefix holding objects, remotely)."""
    if is_remote(path):
        return _gfile().isdir(path)
    return os.path.isdir(path)


def event_files(run_dir: str) -> list[str]:
    """Event files directly in ``run_dir`` (one run), sorted by name as TensorBoard reads them."""
    if is_remote(run_dir):
        gfile = _gfile()
        names = gfile.listdir(run_dir) if gfile.isdir(run_dir) else []
    else:
        try:
            names = [e.name for e in os.scandir(run_dir) if e.is_file()]
        except FileNotFoundError:
            names = []
    return [join(run_dir, name) for name in sorted(names) if is_event_file(name)]


def run_dirs(logdir: str) -> Iterator[tuple[str, str]]:
    """``(run, directory)`` for every directory under ``logdir`` holding event files, sorted.

    Raises ``FileNotFoundError`` naming ``logdir`` when it is not a directory.
    """
    if is_remote(logdir):
        logdir = logdir.rstrip("/")
        walk = _gfile().walk(logdir)
    elif os.path.isdir(logdir):
        walk = os.walk(logdir)
    else:
        raise FileNotFoundError(f"logdir {logdir!r} does not exist or is not a directory")
    found = [
        (run_name(logdir, directory), directory)
        for directory, _, files in walk
        if any(is_event_file(name) for name in files)
    ]
    yield from sorted(found)


def run_name(logdir: str, directory: str) -> str:
    """A run directory relative to the logdir, with ``/`` separators; ``"."`` for the logdir."""
    if is_remote(logdir):
        return directory.rstrip("/")[len(logdir.rstrip("/")) :].lstrip("/") or "."
    return os.path.relpath(directory, logdir).replace(os.sep, "/")

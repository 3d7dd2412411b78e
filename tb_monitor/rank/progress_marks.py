"""Progress other than steps, for the stall rule: a rank fetching batches, or saving a checkpoint,
is not hung even when it makes no optimizer step (an evaluation loop, rank 0 writing a snapshot
while the others wait for it).

``ProgressMarks.install`` wraps, once per process, torch's ``DataLoader`` iterators' ``__next__``
(one clock read per batch), ``torch.save`` and ``torch.distributed.checkpoint``'s ``save`` and
``async_save`` (while inside one the rank is saving). The checkpoint module costs seconds to
import, so it is wrapped when the user's code imports it (``when_imported``), never imported
here. ``RankHealth`` also marks each collective it sees completed, and its heartbeat reports
``rank/since_progress_s`` and ``rank/in_save_s`` from these marks.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from tb_monitor._guard import reraise_theirs

__all__ = ["ProgressMarks", "when_imported"]

_MARK = "__tb_monitor_progress__"  # on our wrappers: the function they wrap
_CHECKPOINT = "torch.distributed.checkpoint"


class ProgressMarks:
    """When this rank last made progress, and since when it is saving a checkpoint.

    ``at`` is written by the training thread (a batch fetched, a collective left) and read by the
    heartbeat's: a float attribute, so no lock is needed there.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.at = clock()  # the last progress mark
        self._saving = 0  # saves in progress (a checkpoint's save may call torch.save)
        self._save_since: float | None = None
        self._lock = threading.Lock()  # saves may run on several threads (async_save)
        self._undo: list[Callable[[], None]] = []

    def in_save_s(self, now: float) -> float:
        """Seconds inside the current checkpoint save, 0.0 outside one."""
        since = self._save_since
        return 0.0 if since is None else max(0.0, now - since)

    def forget(self) -> None:
        """In a forked child: a parent's thread may have held the lock, and its saves are its own."""
        self._lock = threading.Lock()
        self._saving, self._save_since = 0, None

    # -- install / close ------------------------------------------------------------------------

    def install(self) -> ProgressMarks:
        """Wrap the DataLoader iterators, ``torch.save`` and (now or once imported) the
        distributed checkpoint's saves."""
        import torch
        from torch.utils.data import dataloader

        iterator = dataloader._BaseDataLoaderIter
        self._wrap(iterator, "__next__", self._batches)
        self._wrap(torch, "save", self._saves)
        self._undo.append(when_imported(_CHECKPOINT, self._wrap_checkpoint))
        return self

    def close(self) -> None:
        """Put back what ``install`` wrapped."""
        while self._undo:
            self._undo.pop()()

    def _wrap_checkpoint(self, module: ModuleType) -> None:
        for name in ("save", "async_save"):
            if hasattr(module, name):
                self._wrap(module, name, self._saves)

    def _wrap(self, owner: Any, name: str, wrapper: Callable[[Any], Any]) -> None:
        """Replace ``owner.name`` by ``wrapper(original)``, unless already ours (once per
        process); its undo puts the original back if ours is still there."""
        original = getattr(owner, name, None)
        if original is None or hasattr(original, _MARK):
            return
        wrapped = wrapper(original)
        setattr(wrapped, _MARK, original)
        setattr(owner, name, wrapped)

        def undo() -> None:
            if getattr(owner, name, None) is wrapped:
                setattr(owner, name, original)

        self._undo.append(undo)

    # -- the wrappers (the training thread) -----------------------------------------------------

    def _batches(self, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        clock, me = self._clock, self

        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            data = original(iterator)
            me.at = clock()
            return data

        return __next__

    def _saves(self, original: Callable[..., Any]) -> Callable[..., Any]:
        me = self

        @functools.wraps(original)
        def save(*args: Any, **kwargs: Any) -> Any:
            me._enter_save()
            try:
                return original(*args, **kwargs)
            finally:
                me._leave_save()

        return save

    def _enter_save(self) -> None:
        with self._lock:
            self._saving += 1
            if self._save_since is None:
                self._save_since = self._clock()

    def _leave_save(self) -> None:
        with self._lock:
            self._saving -= 1
            self.at = self._clock()
            if self._saving <= 0:
                self._saving, self._save_since = 0, None


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the module ``name``'s spec from the other finders on, its
    loader made to call ``callback`` once the module has run."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self._name, self._callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        self.remove()
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, callback = loader.exec_module, self._callback

        def exec_module(module: ModuleType) -> None:
            run(module)
            _call(callback, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> Callable[[], None]:
    """Call ``callback(module)`` once the module ``name`` is imported: now if it is, else right
    after it runs (before whoever imports it gets it). Returns the undo of the waiting hook."""
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return lambda: None
    hook = _AfterImport(name, callback)
    sys.meta_path.insert(0, hook)
    return hook.remove


def _call(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    """Our callback on a user's import: a fault of ours warns and never breaks the import."""
    try:
        callback(module)
    except Exception as exc:  # noqa: BLE001 (telemetry never breaks training)
        reraise_theirs(exc)
        warnings.warn(f"tb_monitor: could not wrap {module.__name__}: {exc!r}", stacklevel=2)

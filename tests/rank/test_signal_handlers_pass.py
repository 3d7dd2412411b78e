"""An exception a user's signal handler raises inside a guard of ours reaches the user's code:
telemetry swallows its own faults, never theirs."""

from __future__ import annotations

import os
import signal
import types

import pytest

from tb_monitor._guard import reraise_theirs
from tb_monitor.rank.progress_marks import when_imported


class Preempted(RuntimeError):
    """What the user's handler raises."""


def _raise(signum, frame):
    raise Preempted(f"signal {signum}")


@pytest.fixture
def users_handler():
    """SIGUSR1's handler raises, as a user's SIGTERM handler that saves and leaves may."""
    before = signal.signal(signal.SIGUSR1, _raise)
    yield
    signal.signal(signal.SIGUSR1, before)


def _signalled(module: types.ModuleType) -> None:
    """Our callback, interrupted by the user's handler while it runs."""
    os.kill(os.getpid(), signal.SIGUSR1)
    sum(range(1000))  # the handler runs between two bytecodes, here at the latest


def test_a_handlers_exception_inside_our_import_hook_reaches_the_user(users_handler):
    """The handler's exception comes out of our guarded callback, not a warning."""
    with pytest.raises(Preempted):
        when_imported("json", _signalled)


def test_a_fault_of_ours_is_still_only_a_warning(users_handler):
    """Our own fault in the same guard warns and lets the import go on."""

    def broken(module):
        raise ValueError("ours")

    with pytest.warns(UserWarning, match="could not wrap json"):
        when_imported("json", broken)


def test_the_gradient_hook_passes_a_handlers_exception_on(users_handler):
    """DDP's gradient-wait hook hands the user's exception back, and stays on."""
    from tb_monitor.rank.grad_wait import GradWait

    wait = GradWait.__new__(GradWait)
    wait._failed = False
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        sum(range(1000))
    except Preempted as exc:
        with pytest.raises(Preempted):
            wait._fail(exc)
    assert wait._failed is False


def _reraised_from(handler) -> None:
    """``handler`` installed for SIGUSR2, signalled inside a guard that asks ``reraise_theirs``."""
    before = signal.signal(signal.SIGUSR2, handler)
    try:
        try:
            os.kill(os.getpid(), signal.SIGUSR2)
            sum(range(1000))
        except Preempted as exc:
            reraise_theirs(exc)
    finally:
        signal.signal(signal.SIGUSR2, before)


def test_an_exception_from_a_partial_handler_is_theirs():
    """A handler installed as a functools.partial is recognised too."""
    import functools

    with pytest.raises(Preempted):
        _reraised_from(functools.partial(_raise))


class _Compose:
    """A handler object, as Lightning installs one (``_HandlersCompose``)."""

    def __call__(self, signum, frame):
        raise Preempted(f"signal {signum}")


def test_an_exception_from_a_handler_object_is_theirs():
    """A handler installed as an object with ``__call__`` is recognised too."""
    with pytest.raises(Preempted):
        _reraised_from(_Compose())

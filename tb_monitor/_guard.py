"""What a guard of ours on the user's thread lets through: the user's own exceptions.

Telemetry never breaks training: where our code runs on the training thread (a hook in its
backward, a wrapper around its collectives, an import hook), a fault of ours is a warning and
a counted drop. But Python runs signal handlers on the main thread between any two of its
bytecodes, ours included, so a handler of the user's (a SIGTERM handler that raises to save and
leave, a fault injected from outside) may raise inside our guard. That exception is the user's:
swallowed, the job would run on as if nothing happened (found by the fault campaign: a rank
asked to raise inside DDP's gradient hook trained on, the job read as succeeded).
"""

from __future__ import annotations

import functools
import signal
from types import CodeType

__all__ = ["reraise_theirs"]


def reraise_theirs(exc: BaseException) -> None:
    """Raise ``exc`` again where a Python signal handler raised it; else return (a fault of
    ours, for the guard to handle). Called in an ``except`` block: rare, so it may look."""
    handlers = _handler_codes()
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in handlers:
            raise exc
        tb = tb.tb_next


def _handler_codes() -> set[CodeType]:
    """The code of every Python function installed as a signal handler now."""
    codes = set()
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (OSError, ValueError):  # a signal Python cannot name here
            continue
        while isinstance(handler, functools.partial):
            handler = handler.func
        # a function, a bound method, or an object with __call__ (Lightning installs those)
        call = next(
            (vars(k)["__call__"] for k in type(handler).__mro__ if "__call__" in vars(k)), None
        )
        for function in (handler, call):
            code = getattr(getattr(function, "__func__", function), "__code__", None)
            if isinstance(code, CodeType):
                codes.add(code)
    return codes

"""torchelastic's metrics API: metric groups, each routed to a ``MetricHandler``.

Same names and behaviour as ``torch.distributed.elastic.metrics.api``, without torch. Behind the
surface: one ``MetricStream`` is cached per group, so ``put_metric`` builds nothing but the
``MetricData``; ``configure`` is thread-safe (the read path takes no lock, as dict reads are
atomic); and a group or metric name that is not a ``str`` fails with a ``TypeError`` naming it.

Where we differ from torch (on purpose), as ``tb_monitor.log_event`` does: a handler whose
``emit`` raises never reaches the code that put the metric (torch's ``put_metric`` hands the
error to it, and inside ``@prof`` it would even replace the function's own result or
exception). That metric is dropped, the error logged once per handler
(``logging.getLogger("tb_monitor")``, with its traceback) and counted (:func:`handler_errors`);
the handler stays configured. Unless the caller's own mistake made it fail: a value that is not
a real number or a one-element tensor, a name no store can hold (a lone surrogate). That is
raised to the caller, naming the metric, as any bad argument is. The checks run only once a
handler failed, so a handler that takes any value (torch's console one) still gets it.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
import warnings
from collections import namedtuple
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from tb_monitor import _checks
from tb_monitor._guard import reraise_theirs

__all__ = [
    "ConsoleMetricHandler",
    "ConsoleMetricsHandler",
    "MetricData",
    "MetricHandler",
    "MetricStream",
    "MetricsConfig",
    "NullMetricHandler",
    "NullMetricsHandler",
    "configure",
    "default_handler",
    "getStream",
    "get_elapsed_time_ms",
    "handler_errors",
    "prof",
    "profile",
    "publish_metric",
    "put_metric",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_log = logging.getLogger("tb_monitor")

MetricData = namedtuple("MetricData", ["timestamp", "group_name", "name", "value"])
# namedtuple's generated __new__ is a Python frame around this call; skipping it is the cheapest
# way to build a MetricData on the hot path.
_tuple_new = tuple.__new__


class MetricsConfig:
    """Free-form ``params`` for metrics back ends, as torchelastic's launcher passes them."""

    __slots__ = ["params"]

    def __init__(self, params: dict[str, str] | None = None):
        self.params = params
        if self.params is None:
            self.params = {}


class MetricHandler(abc.ABC):
    """Where the metrics of the groups configured with it go."""

    @abc.abstractmethod
    def emit(self, metric_data: MetricData) -> None:
        """Deliver one data point; called on the thread that put the metric."""


class ConsoleMetricHandler(MetricHandler):
    """Prints ``[<timestamp>][<group>]: <name>=<value>`` to stdout."""

    def emit(self, metric_data: MetricData) -> None:
        print(
            f"[{metric_data.timestamp}][{metric_data.group_name}]: {metric_data.name}={metric_data.value}"
        )


class NullMetricHandler(MetricHandler):
    """Drops every metric: the default for groups nobody configured."""

    def emit(self, metric_data: MetricData) -> None:
        pass


# torchelastic's own module documentation spells the handlers this way.
ConsoleMetricsHandler = ConsoleMetricHandler
NullMetricsHandler = NullMetricHandler


class MetricStream:
    """The metrics of one group, bound to the handler configured for it."""

    __slots__ = ("group_name", "handler")

    def __init__(self, group_name: str, handler: MetricHandler):
        _check_group(group_name)
        _check_handler(handler)
        self.group_name = group_name
        self.handler = handler

    def add_value(self, metric_name: str, metric_value: int) -> None:
        """Emit ``metric_value`` for ``metric_name``, stamped with the current time."""
        if not isinstance(metric_name, str):
            raise TypeError(
                f"metric name must be a str, got {metric_name!r} ({type(metric_name).__name__})"
            )
        try:
            self.handler.emit(
                _tuple_new(MetricData, (time.time(), self.group_name, metric_name, metric_value))
            )
        except Exception as exc:
            reraise_theirs(exc)
            _check_metric(self.group_name, metric_name, metric_value)
            _handler_failed(self.handler, self.group_name, metric_name)


def _check_metric(group: str, name: str, value: object) -> None:
    """Raise the caller's mistake, naming the metric: a value that is not a real number or a
    one-element tensor (left unread), a name with a lone surrogate."""
    from tb_monitor import contract  # here, not above: a Stat alone need not load it

    tag = contract.metric_tag(group, name)
    _checks.scalar_value(value, f"scalar {tag!r}")


#: Per handler (by id), how many metrics its ``emit`` raised on; a handler's first is logged.
_errors: dict[int, int] = {}


def _handler_failed(handler: MetricHandler, group: str, name: str) -> None:
    """Count a metric ``handler`` raised on; log the first, with the traceback being handled."""
    with _lock:
        count = _errors[id(handler)] = _errors.get(id(handler), 0) + 1
    if count == 1:
        _log.exception(
            "tb_monitor metric handler %r raised on metric %r of group %r; the metric is "
            "dropped, the handler stays configured and its further errors are counted "
            "(handler_errors), not reported",
            handler,
            name,
            group,
        )


def handler_errors(handler: MetricHandler) -> int:
    """How many metrics ``handler``'s ``emit`` raised on, and so lost (our addition)."""
    return _errors.get(id(handler), 0)


def _check_group(group: object) -> None:
    if not isinstance(group, str):
        raise TypeError(f"metric group must be a str, got {group!r} ({type(group).__name__})")


def _check_handler(handler: object) -> None:
    if not callable(getattr(handler, "emit", None)):
        raise TypeError(f"metric handler must have an emit(metric_data) method, got {handler!r}")


_metrics_map: dict[str, MetricHandler] = {}
_default_metrics_handler: MetricHandler = NullMetricHandler()
# Streams already built, read without a lock. Writers hold _lock, and configure() empties the
# cache so every group re-resolves its handler; a stream taken earlier keeps its old handler, as
# torch's do. Bounded, so a job inventing groups on the fly cannot grow it without limit.
_streams: dict[str, MetricStream] = {}
_MAX_CACHED_STREAMS = 1024
_lock = threading.Lock()


def configure(handler: MetricHandler, group: str | None = None) -> None:
    """Route ``group`` to ``handler``; with ``group=None``, every group not configured by name."""
    global _default_metrics_handler
    _check_handler(handler)
    if group is not None:
        _check_group(group)
    with _lock:
        if group is None:
            _default_metrics_handler = handler
        else:
            _metrics_map[group] = handler
        _streams.clear()


def default_handler() -> MetricHandler:
    """The handler of every group not configured by name (our addition: torch has no getter)."""
    return _default_metrics_handler


def getStream(group: str) -> MetricStream:
    """The stream of ``group``, bound to its configured handler (or the default one)."""
    try:
        return _streams[group]
    except (KeyError, TypeError):  # TypeError: an unhashable group, rejected below by name
        return _new_stream(group)


def _new_stream(group: str) -> MetricStream:
    _check_group(group)
    with _lock:
        stream = _streams.get(group)
        if stream is None:
            stream = MetricStream(group, _metrics_map.get(group, _default_metrics_handler))
            if len(_streams) < _MAX_CACHED_STREAMS:
                _streams[group] = stream
        return stream


def _get_metric_name(fn: Callable[..., Any]) -> str:
    """``Class.method`` for a method, ``<leaf module>.<function>`` for a free function."""
    qualname = fn.__qualname__
    split = qualname.split(".")
    if len(split) == 1:
        module = fn.__module__
        if module:
            return module.split(".")[-1] + "." + split[0]
        return split[0]
    return qualname


def prof(fn: _F | None = None, group: str = "torchelastic") -> Any:
    """Decorator publishing ``<name>.success`` or ``<name>.failure`` (1) and ``<name>.duration.ms``.

    The name is the function's qualified name (``Class.method``), or ``<leaf module>.<function>``
    for a free function. Use it bare (``@prof``) or with a group (``@prof(group="agent")``).
    Metrics go through ``put_metric``, so patching ``getStream`` captures them.
    """
    if fn is not None and not callable(fn):
        raise TypeError(
            f"prof() decorates a function, got {fn!r}; pass the group by keyword: "
            f"@prof(group={fn!r})"
        )
    _check_group(group)

    def wrap(f: _F) -> _F:
        return _profiled(f, _get_metric_name(f), group)

    return wrap(fn) if fn is not None else wrap


def _profiled(f: _F, key: str, group: str) -> _F:
    """``f`` publishing ``<key>.success`` or ``<key>.failure`` and ``<key>.duration.ms``."""
    success, failure, duration = f"{key}.success", f"{key}.failure", f"{key}.duration.ms"

    @wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            result = f(*args, **kwargs)
            put_metric(success, 1, group)
        except Exception:
            put_metric(failure, 1, group)
            raise
        finally:
            put_metric(duration, get_elapsed_time_ms(start), group)
        return result

    return wrapper  # type: ignore[return-value]


def profile(group: str | None = None) -> Callable[[_F], _F]:
    """Deprecated: use ``@prof``. Publishes ``<function name>.success|failure|duration.ms``.

    Without a group the metrics go to ``put_metric``'s default group, ``"torchelastic"``, and so
    to the default handler unless that group has its own (torch publishes them with the group
    name None, which only the default handler can take).
    """
    warnings.warn("Deprecated, use `@prof` instead", FutureWarning, stacklevel=2)
    if group is None:
        group = "torchelastic"
    _check_group(group)

    def wrap(func: _F) -> _F:
        return _profiled(func, func.__name__, group)

    return wrap


def put_metric(metric_name: str, metric_value: int, metric_group: str = "torchelastic") -> None:
    """Publish one data point of ``metric_name`` in ``metric_group``.

    ::

     put_metric("metric_name", 1)
     put_metric("metric_name", 1, "metric_group_name")
    """
    getStream(metric_group).add_value(metric_name, metric_value)


def publish_metric(metric_group: str, metric_name: str, metric_value: int) -> None:
    """Deprecated: use ``put_metric(metric_name, metric_value, metric_group)``."""
    warnings.warn(
        "Deprecated, use `put_metric(metric_group)(metric_name, metric_value)` instead",
        FutureWarning,
        stacklevel=2,
    )
    getStream(metric_group).add_value(metric_name, metric_value)


def get_elapsed_time_ms(start_time_in_seconds: float) -> int:
    """Milliseconds elapsed since ``start_time_in_seconds`` (a ``time.time()`` value)."""
    end_time = time.time()
    return int((end_time - start_time_in_seconds) * 1000)

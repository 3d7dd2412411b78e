"""tb_monitor.elastic.metrics: torchelastic's metrics API, ported behaviour by behaviour."""

from __future__ import annotations

import abc
import subprocess
import sys
import textwrap
import threading
import time
from unittest import mock

import pytest

import tb_monitor.elastic.metrics as metrics
from tb_monitor.elastic.metrics import api
from tb_monitor.elastic.metrics.api import (
    MetricData,
    MetricHandler,
    MetricStream,
    _get_metric_name,
    prof,
)


class RecordingHandler(MetricHandler):
    """Keeps the last data point per metric name, as torch's test handler does."""

    def __init__(self) -> None:
        self.metric_data: dict[str, MetricData] = {}

    def emit(self, metric_data: MetricData) -> None:
        self.metric_data[metric_data.name] = metric_data


class CountingHandler(MetricHandler):
    """Counts data points, safely from many threads."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def emit(self, metric_data: MetricData) -> None:
        with self._lock:
            self.count += 1


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test starts from torchelastic's defaults: nothing configured, everything dropped."""
    monkeypatch.setattr(api, "_metrics_map", {})
    monkeypatch.setattr(api, "_default_metrics_handler", api.NullMetricHandler())
    monkeypatch.setattr(api, "_streams", {})


@pytest.fixture
def recorded():
    """A RecordingHandler that every getStream() lookup returns, patched like torch's tests do."""
    handler = RecordingHandler()
    stream = MetricStream("torchelastic", handler)
    with mock.patch("tb_monitor.elastic.metrics.api.getStream", return_value=stream):
        yield handler


def foo_1():
    pass


class Parent(abc.ABC):
    @abc.abstractmethod
    def func(self):
        raise NotImplementedError

    def base_func(self):
        self.func()


class Child(Parent):
    @prof
    def func(self):
        pass


class Profiled:
    def foo_2(self):
        pass

    @prof
    def bar(self):
        return "bar result"

    @prof
    def throw(self):
        raise RuntimeError("boom")

    @prof(group="agent")
    def bar2(self):
        pass


def test_metric_name_of_free_function_is_leaf_module_dot_name():
    """A free function is named <leaf module>.<function>."""
    foo_1.__module__ = "some.package.api_test"
    assert _get_metric_name(foo_1) == "api_test.foo_1"


def test_metric_name_of_method_is_qualified_name():
    """A method is named by its qualified name, Class.method."""
    assert _get_metric_name(Profiled().foo_2) == "Profiled.foo_2"


def test_metric_name_without_module_is_bare_name():
    """A free function without a module is named by itself."""

    def local():
        pass

    local.__qualname__ = "local"
    local.__module__ = ""
    assert _get_metric_name(local) == "local"


def test_prof_publishes_success_and_duration(recorded):
    """A call that returns publishes <name>.success = 1 and <name>.duration.ms, no failure."""
    assert Profiled().bar() == "bar result"
    assert recorded.metric_data["Profiled.bar.success"].value == 1
    assert "Profiled.bar.failure" not in recorded.metric_data
    assert isinstance(recorded.metric_data["Profiled.bar.duration.ms"].value, int)


def test_prof_publishes_failure_and_duration_and_reraises(recorded):
    """A call that raises publishes <name>.failure = 1 and <name>.duration.ms, and re-raises."""
    with pytest.raises(RuntimeError, match="boom"):
        Profiled().throw()
    assert recorded.metric_data["Profiled.throw.failure"].value == 1
    assert "Profiled.throw.success" not in recorded.metric_data
    assert "Profiled.throw.duration.ms" in recorded.metric_data


def test_prof_with_group_publishes_to_that_group():
    """@prof(group=...) publishes to the stream of that group."""
    handler = RecordingHandler()
    metrics.configure(handler, group="agent")
    Profiled().bar2()
    assert handler.metric_data["Profiled.bar2.success"].group_name == "agent"


def test_prof_bare_publishes_to_torchelastic_group():
    """Bare @prof publishes to the torchelastic group."""
    handler = RecordingHandler()
    metrics.configure(handler, group="torchelastic")
    Profiled().bar()
    assert handler.metric_data["Profiled.bar.success"].group_name == "torchelastic"


def test_prof_on_overriding_method_is_named_after_subclass(recorded):
    """A decorated override called through the base class is named after the subclass."""
    Child().base_func()
    assert recorded.metric_data["Child.func.success"].value == 1
    assert "Child.func.duration.ms" in recorded.metric_data


def test_prof_keeps_function_identity():
    """The wrapper keeps the wrapped function's name, docstring and __wrapped__."""

    def documented():
        """Docstring."""

    wrapped = prof(documented)
    assert (wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == (
        "documented",
        "Docstring.",
        documented,
    )


def test_prof_with_positional_group_is_a_type_error():
    """@prof("agent") is a mistake for @prof(group="agent"): a TypeError says so."""
    with pytest.raises(TypeError, match=r"group='agent'"):
        prof("agent")


def test_prof_with_non_str_group_is_a_type_error():
    """A non-str group for prof fails at decoration, naming it."""
    with pytest.raises(TypeError, match="42"):
        prof(group=42)


def test_profile_is_deprecated_and_publishes_by_function_name():
    """profile(group) warns FutureWarning and publishes <function>.success|duration.ms."""
    handler = RecordingHandler()
    metrics.configure(handler, group="old")
    with pytest.warns(FutureWarning, match="use `@prof`"):
        decorator = metrics.profile("old")

    @decorator
    def legacy():
        return 7

    assert legacy() == 7
    assert handler.metric_data["legacy.success"].value == 1
    assert "legacy.duration.ms" in handler.metric_data


def test_profile_without_group_publishes_to_the_default_handler():
    """profile() with no group (torch's default) publishes through the default handler."""
    handler = RecordingHandler()
    metrics.configure(handler)
    with pytest.warns(FutureWarning, match="use `@prof`"):
        decorator = metrics.profile()

    @decorator
    def legacy():
        return 7

    assert legacy() == 7
    assert handler.metric_data["legacy.success"].value == 1


def test_publish_metric_is_deprecated_and_publishes():
    """publish_metric(group, name, value) warns FutureWarning and publishes."""
    handler = RecordingHandler()
    metrics.configure(handler, group="old")
    with pytest.warns(FutureWarning, match="put_metric"):
        metrics.publish_metric("old", "m", 3)
    assert handler.metric_data["m"].value == 3


def test_put_metric_goes_to_the_group_handler():
    """put_metric delivers (timestamp, group, name, value) to its group's handler."""
    handler = RecordingHandler()
    metrics.configure(handler, group="my_app")
    before = time.time()
    metrics.put_metric("latency", 12, "my_app")
    data = handler.metric_data["latency"]
    assert (data.group_name, data.name, data.value) == ("my_app", "latency", 12)
    assert before <= data.timestamp <= time.time()


def test_put_metric_defaults_to_torchelastic_group():
    """Without a group, put_metric publishes to the torchelastic group."""
    handler = RecordingHandler()
    metrics.configure(handler, group="torchelastic")
    metrics.put_metric("restarts", 1)
    assert handler.metric_data["restarts"].group_name == "torchelastic"


def test_configure_without_group_sets_default_for_unconfigured_groups():
    """configure(handler) routes every group not configured by name, and only those."""
    default, named = RecordingHandler(), RecordingHandler()
    metrics.configure(named, group="named")
    metrics.configure(default)
    metrics.put_metric("a", 1, "anything")
    metrics.put_metric("b", 2, "named")
    assert set(default.metric_data) == {"a"}
    assert set(named.metric_data) == {"b"}


def test_reconfigure_reroutes_later_metrics():
    """After configure() replaces a group's handler, its later metrics go to the new one."""
    first, second = RecordingHandler(), RecordingHandler()
    metrics.configure(first, group="g")
    metrics.put_metric("before", 1, "g")
    metrics.configure(second, group="g")
    metrics.put_metric("after", 1, "g")
    assert (set(first.metric_data), set(second.metric_data)) == ({"before"}, {"after"})


def test_stream_taken_before_configure_keeps_its_handler():
    """A stream obtained earlier keeps the handler it was bound to, as torch's streams do."""
    first, second = RecordingHandler(), RecordingHandler()
    metrics.configure(first, group="g")
    stream = metrics.getStream("g")
    metrics.configure(second, group="g")
    stream.add_value("late", 1)
    assert (stream.group_name, stream.handler) == ("g", first)
    assert set(first.metric_data) == {"late"}


def test_metric_data_is_a_namedtuple_with_torch_fields():
    """MetricData is a namedtuple (timestamp, group_name, name, value)."""
    data = MetricData(1.5, "g", "n", 3)
    assert MetricData._fields == ("timestamp", "group_name", "name", "value")
    assert tuple(data) == (1.5, "g", "n", 3)


def test_console_handler_prints_torch_format(capsys):
    """ConsoleMetricHandler prints [<timestamp>][<group>]: <name>=<value>."""
    metrics.ConsoleMetricHandler().emit(MetricData(1574213883.4182858, "my_app", "m", 5))
    assert capsys.readouterr().out == "[1574213883.4182858][my_app]: m=5\n"


def test_documented_handler_spellings_are_aliases():
    """ConsoleMetricsHandler and NullMetricsHandler, as torch's docs spell them, are aliases."""
    assert metrics.ConsoleMetricsHandler is metrics.ConsoleMetricHandler
    assert metrics.NullMetricsHandler is metrics.NullMetricHandler


def test_metric_handler_is_abstract():
    """MetricHandler cannot be instantiated without emit."""
    with pytest.raises(TypeError):
        MetricHandler()


def test_metrics_config_params_default_to_empty_dict():
    """MetricsConfig() holds an empty params dict, MetricsConfig(p) holds p."""
    assert metrics.MetricsConfig().params == {}
    assert metrics.MetricsConfig({"k": "v"}).params == {"k": "v"}


def test_get_elapsed_time_ms_counts_milliseconds(monkeypatch):
    """get_elapsed_time_ms is the whole milliseconds since a time.time() value."""
    monkeypatch.setattr(api.time, "time", lambda: 1000.0)
    assert metrics.get_elapsed_time_ms(1000.0 - 2.5) == 2500


@pytest.mark.parametrize("name", [7, None, b"bytes"])
def test_non_str_metric_name_is_a_type_error(name):
    """A metric name that is not a str is rejected, naming it, and nothing is emitted."""
    handler = RecordingHandler()
    metrics.configure(handler)
    with pytest.raises(TypeError, match=repr(name).replace("(", r"\(")):
        metrics.put_metric(name, 1)
    assert handler.metric_data == {}


@pytest.mark.parametrize("group", [7, None, ["unhashable"]])
def test_non_str_group_in_put_metric_is_a_type_error(group):
    """A metric group that is not a str (even unhashable) is rejected by name."""
    with pytest.raises(TypeError, match=r"metric group must be a str, got .*"):
        metrics.put_metric("m", 1, group)


def test_rejected_metric_loses_nothing_accepted():
    """A bad put between good ones leaves the accepted metrics delivered and the stream usable."""
    handler = RecordingHandler()
    metrics.configure(handler, group="g")
    metrics.put_metric("first", 1, "g")
    with pytest.raises(TypeError):
        metrics.put_metric(3.5, 1, "g")
    metrics.put_metric("second", 2, "g")
    assert set(handler.metric_data) == {"first", "second"}


def test_configure_with_non_str_group_is_a_type_error():
    """configure() rejects a non-str group by name and keeps the existing routing."""
    with pytest.raises(TypeError, match="12"):
        metrics.configure(RecordingHandler(), group=12)
    assert api._metrics_map == {}


def test_configure_with_object_without_emit_is_a_type_error():
    """configure() rejects a handler without emit() before any metric reaches it."""
    with pytest.raises(TypeError, match="emit"):
        metrics.configure(object(), group="g")


def test_many_groups_beyond_the_stream_cache_are_routed_correctly():
    """Groups beyond the stream cache's bound still reach their handler; the cache stays bounded."""
    handler = CountingHandler()
    metrics.configure(handler)
    groups = api._MAX_CACHED_STREAMS + 100
    for i in range(groups):
        metrics.put_metric("m", 1, f"group-{i}")
    assert handler.count == groups
    assert len(api._streams) <= api._MAX_CACHED_STREAMS


def _run_threads(target, count):
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)


def test_put_metric_from_many_threads_loses_nothing():
    """Metrics put concurrently from many threads all reach the handler."""
    handler = CountingHandler()
    metrics.configure(handler, group="g")
    _run_threads(lambda i: [metrics.put_metric("m", j, "g") for j in range(2000)], 8)
    assert handler.count == 8 * 2000


def test_configure_while_putting_loses_nothing():
    """Re-configuring a group while threads put to it drops no metric: each reaches one handler."""
    handlers = [CountingHandler(), CountingHandler()]
    metrics.configure(handlers[0], group="g")
    done = threading.Event()

    def reconfigure():
        flips = 0
        while not done.is_set() or flips < 10:
            metrics.configure(handlers[flips % 2], group="g")
            metrics.configure(handlers[flips % 2])  # the default changes too
            flips += 1

    flipper = threading.Thread(target=reconfigure)
    flipper.start()
    try:
        _run_threads(lambda i: [metrics.put_metric("m", j, "g") for j in range(2000)], 6)
    finally:
        done.set()
        flipper.join(timeout=120)
    assert sum(h.count for h in handlers) == 6 * 2000


def test_configure_many_groups_concurrently_routes_each():
    """Threads configuring and using their own groups concurrently each get all their metrics."""
    handlers = [CountingHandler() for _ in range(8)]

    def work(i):
        metrics.configure(handlers[i], group=f"group-{i}")
        for j in range(1000):
            metrics.put_metric("m", j, f"group-{i}")

    _run_threads(work, 8)
    assert [h.count for h in handlers] == [1000] * 8


def test_metrics_work_without_torch():
    """The metrics API imports and publishes with torch unimportable, and never imports it."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        import tb_monitor.elastic.metrics as metrics
        metrics.configure(metrics.ConsoleMetricsHandler(), group="app")
        metrics.put_metric("m", 3, "app")

        @metrics.prof(group="app")
        def step():
            pass

        step()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "][app]: m=3" in out
    assert "][app]: __main__.step.success=1" in out

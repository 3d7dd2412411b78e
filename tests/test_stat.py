"""Stat behaviour, run against both accumulators: the C one and the pure-Python fallback."""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from conftest import need

from tb_monitor import _accumulators, _env, _stat_timer
from tb_monitor._event import register_event_handler, unregister_event_handler
from tb_monitor._stat import Aggregation, Stat, StatSource
from tb_monitor.contract import STAT_EVENT
from tb_monitor.testing import manual_clock, stat_implementations

HOUR = timedelta(hours=1)
ALL = list(Aggregation)


@pytest.fixture(params=["c", "python"])
def stat_cls(request):
    """Each Stat implementation in turn; the C one must be built when CI=true."""
    implementation = stat_implementations()[request.param]
    if implementation is None:
        need("tb_monitor._accumulator")  # skips locally, fails in CI
        pytest.skip("the C accelerator is built but disabled on this interpreter")
    return implementation


@pytest.fixture
def clock():
    """Stat windows follow a manual clock for the test: they end on clock.advance()."""
    with manual_clock() as manual:
        yield manual


class Events:
    """Collects the Stat events logged while a test runs."""

    def __init__(self) -> None:
        self.all = []
        self._lock = threading.Lock()

    def __call__(self, event) -> None:
        with self._lock:
            self.all.append(event)

    def of(self, name: str) -> list[dict]:
        """Data of the Stat events of the Stat ``name`` (other tests' Stats may log too)."""
        with self._lock:
            return [
                e.data
                for e in self.all
                if e.name == STAT_EVENT and any(k.startswith(name + ".") for k in e.data)
            ]


@pytest.fixture
def events():
    """Every event logged during the test."""
    collected = Events()
    handle = register_event_handler(collected)
    yield collected
    unregister_event_handler(handle)


def test_stat_derives_from_the_fastest_available_accumulator():
    """Stat is built on the C accumulator when it is available and allowed, else on Python's."""
    c_usable = _accumulators.C_ACCUMULATOR is not None and not _env.pure_python()
    expected = _accumulators.C_ACCUMULATOR if c_usable else _accumulators.PyAccumulator
    with Stat("impl", [Aggregation.MEAN], HOUR) as stat:
        assert type(stat) is Stat
        assert isinstance(stat, expected)


def test_stat_can_be_subclassed(events):
    """A subclass of Stat (as of torch.monitor.Stat) builds and logs like Stat."""

    class MyStat(Stat):
        def add_twice(self, value):
            self.add(value)
            self.add(value)

    with MyStat("sub", [Aggregation.SUM], HOUR) as stat:
        stat.add_twice(2.0)
    assert events.of("sub") == [{"sub.sum": 4.0}]


def test_max_samples_logs_the_window_at_once(stat_cls, events):
    """The add that reaches max_samples logs the window immediately (PyTorch's own test)."""
    stat = stat_cls("asdf", [Aggregation.SUM, Aggregation.COUNT], HOUR, max_samples=5)
    for i in range(10):
        stat.add(i)
    assert events.of("asdf") == [{"asdf.sum": 10.0, "asdf.count": 5.0}]
    stat.close()


def test_adds_after_max_samples_are_discarded_until_the_window_ends(stat_cls, events):
    """After the cap, adds are dropped: nothing counts and close() has nothing to log."""
    stat = stat_cls("capped", [Aggregation.COUNT], HOUR, max_samples=2)
    for _ in range(5):
        stat.add(1)
    assert stat.count == 0
    stat.close()
    assert events.of("capped") == [{"capped.count": 2.0}]


def test_count_is_the_number_of_samples_in_the_current_window(stat_cls):
    """count grows with each add and restarts when the window is logged."""
    stat = stat_cls("counted", [Aggregation.MEAN], HOUR, max_samples=3)
    assert stat.count == 0
    stat.add(1)
    stat.add(2)
    assert stat.count == 2
    stat.add(3)
    assert stat.count == 0
    stat.close()


def test_get_before_any_window_reports_zeros(stat_cls):
    """Before a window is logged, get() holds zero for every aggregation, as torch does."""
    stat = stat_cls("fresh", ALL, HOUR)
    assert stat.get() == dict.fromkeys(ALL, 0.0)
    stat.close()


def test_window_values_for_every_aggregation(stat_cls, events):
    """A logged window reports value, mean, count, sum, max and min under <name>.<agg>."""
    stat = stat_cls("loss", ALL, HOUR)
    for v in (4, 1.5, 3, 2.5):
        stat.add(v)
    stat.close()
    expected = {"value": 2.5, "mean": 2.75, "count": 4.0, "sum": 11.0, "max": 4.0, "min": 1.5}
    assert events.of("loss") == [{f"loss.{k}": v for k, v in expected.items()}]
    assert stat.get() == {Aggregation[k.upper()]: v for k, v in expected.items()}


def test_event_keys_follow_the_order_of_the_aggregations(stat_cls, events):
    """Data keys come in the order the aggregations were given, duplicates once."""
    stat = stat_cls("ordered", [Aggregation.MIN, Aggregation.MEAN, Aggregation.MIN], HOUR)
    stat.add(1)
    stat.close()
    assert list(events.of("ordered")[0]) == ["ordered.min", "ordered.mean"]


def test_close_logs_pending_samples_once(stat_cls, events):
    """close() logs the open window; a second close() logs nothing."""
    stat = stat_cls("closing", [Aggregation.SUM], HOUR)
    stat.add(2)
    stat.close()
    stat.close()
    assert events.of("closing") == [{"closing.sum": 2.0}]
    assert stat.closed


def test_a_source_is_fed_into_each_window_just_before_it_ends(stat_cls, events, clock):
    """A StatSource's waiting samples land in the window that ends, and on close."""
    waiting: list[float] = []

    def feed() -> None:
        while waiting:
            stat.add(waiting.pop(0))

    source = StatSource(feed=feed, forget=waiting.clear)
    stat = stat_cls(
        "fed", [Aggregation.SUM, Aggregation.COUNT], timedelta(seconds=10), source=source
    )
    waiting += [1.0, 2.0]
    assert stat.count == 0  # the producer only queued them
    clock.advance(10)
    waiting.append(5.0)
    stat.close()
    assert events.of("fed") == [
        {"fed.sum": 3.0, "fed.count": 2.0},
        {"fed.sum": 5.0, "fed.count": 1.0},
    ]


def test_a_forked_child_has_the_source_forget_the_parents_samples(stat_cls, events):
    """After fork() the child's source drops the waiting samples; the parent keeps them."""
    waiting = [1.0]
    source = StatSource(feed=lambda: None, forget=waiting.clear)
    stat = stat_cls("fed_fork", [Aggregation.SUM], HOUR, source=source)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if waiting == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert waiting == [1.0]
    stat.close()


def test_add_after_close_raises_naming_the_stat(stat_cls):
    """A closed Stat refuses samples with an error that names it."""
    stat = stat_cls("shut", [Aggregation.SUM], HOUR)
    stat.close()
    with pytest.raises(RuntimeError, match="'shut' is closed"):
        stat.add(1)


def test_context_manager_logs_pending_samples(stat_cls, events):
    """Leaving a with block closes the Stat and logs its window."""
    with stat_cls("scoped", [Aggregation.MAX], HOUR) as stat:
        stat.add(7)
        stat.add(3)
    assert events.of("scoped") == [{"scoped.max": 7.0}]


def test_garbage_collection_logs_pending_samples(stat_cls, events):
    """A Stat that is garbage-collected logs the samples it still held."""
    stat = stat_cls("collected", [Aggregation.COUNT], HOUR)
    stat.add(1)
    del stat
    gc.collect()
    assert events.of("collected") == [{"collected.count": 1.0}]


def test_a_bound_add_keeps_the_stat_alive(stat_cls, events):
    """Holding only stat.add keeps the Stat open, as a bound method does."""
    add = stat_cls("bound", [Aggregation.COUNT], HOUR).add
    gc.collect()
    add(1)
    add(2)
    assert events.of("bound") == []
    del add
    gc.collect()
    assert events.of("bound") == [{"bound.count": 2.0}]


def test_an_empty_window_logs_nothing(stat_cls, events):
    """Closing a Stat without samples logs no event."""
    stat_cls("empty", [Aggregation.MEAN], HOUR).close()
    assert events.of("empty") == []


def test_bools_and_numpy_scalars_count_as_their_numbers(stat_cls, events):
    """True, numpy ints, floats and bools are added as the numbers they hold."""
    np = need("numpy")
    stat = stat_cls("mixed", [Aggregation.SUM, Aggregation.COUNT], HOUR)
    for v in (True, np.int64(2), np.float32(0.5), np.bool_(True), np.float64(1.5)):
        stat.add(v)
    stat.close()
    assert events.of("mixed") == [{"mixed.sum": 6.0, "mixed.count": 5.0}]


@pytest.mark.parametrize("bad", ["1.0", None, object(), [1.0], b"1"])
def test_non_numbers_raise_typeerror_naming_stat_and_value(stat_cls, events, bad):
    """A non-numeric sample is refused with a TypeError naming both; earlier samples stay."""
    stat = stat_cls("strict", [Aggregation.SUM], HOUR)
    stat.add(1)
    with pytest.raises(TypeError, match="Stat 'strict'") as caught:
        stat.add(bad)
    assert repr(bad) in str(caught.value)
    stat.close()
    assert events.of("strict") == [{"strict.sum": 1.0}]


@pytest.mark.parametrize(
    ("bad", "error"), [(10**400, OverflowError), ("numpy-array", TypeError)], ids=["huge", "array"]
)
def test_failed_conversion_names_the_stat_and_value(stat_cls, bad, error):
    """A value whose conversion fails keeps its error type, prefixed with Stat and value."""
    if bad == "numpy-array":
        bad = need("numpy").ones(3)
    stat = stat_cls("conv", [Aggregation.SUM], HOUR)
    with pytest.raises(error, match=r"^Stat 'conv': add\(\) got ") as caught:
        stat.add(bad)
    assert repr(bad)[:200] in str(caught.value)
    assert isinstance(caught.value.__cause__, error)
    stat.close()


def test_nan_makes_sum_mean_min_and_max_nan(stat_cls, events):
    """A NaN sample is never hidden: every aggregation over it is NaN, wherever it comes."""
    for position in range(3):
        name = f"nan{position}"
        stat = stat_cls(
            name, [Aggregation.SUM, Aggregation.MEAN, Aggregation.MIN, Aggregation.MAX], HOUR
        )
        values = [1.0, 2.0, 3.0]
        values[position] = math.nan
        for v in values:
            stat.add(v)
        stat.close()
        assert all(math.isnan(v) for v in events.of(name)[0].values()), events.of(name)


def test_infinities_aggregate_as_ieee_infinities(stat_cls, events):
    """inf is the max, -inf the min, and their sum is NaN."""
    stat = stat_cls("inf", [Aggregation.SUM, Aggregation.MIN, Aggregation.MAX], HOUR)
    for v in (1.0, math.inf, -math.inf):
        stat.add(v)
    stat.close()
    data = events.of("inf")[0]
    assert data["inf.max"] == math.inf and data["inf.min"] == -math.inf
    assert math.isnan(data["inf.sum"])


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("", [Aggregation.MEAN], HOUR), ValueError, "name must not be empty"),
        ((3, [Aggregation.MEAN], HOUR), TypeError, "name must be a str"),
        (("s", [], HOUR), ValueError, "'s': aggregations must not be empty"),
        (("s", ["mean"], HOUR), ValueError, "'s': unknown aggregation 'mean'"),
        (("s", Aggregation.MEAN, HOUR), TypeError, "'s': aggregations must be a list"),
        (("s", [Aggregation.MEAN], 60), TypeError, "'s': window_size must be a datetime.timedelta"),
        (("s", [Aggregation.MEAN], timedelta(0)), ValueError, "'s': window_size must be at least"),
        (("s", [Aggregation.MEAN], timedelta(seconds=-1)), ValueError, "'s': window_size"),
        (("s", [Aggregation.MEAN], timedelta(microseconds=10)), ValueError, "at least 1 ms"),
        (("s", [Aggregation.MEAN], HOUR, 0), ValueError, "'s': max_samples must be >= 1, got 0"),
        (("s", [Aggregation.MEAN], HOUR, 2.5), TypeError, "'s': max_samples must be an int"),
    ],
)
def test_bad_arguments_raise_naming_the_stat(stat_cls, args, error, message):
    """Invalid construction arguments raise a clear error and register nothing with the timer."""
    before = len(_stat_timer.timer.stats())
    with pytest.raises(error, match=message):
        stat_cls(*args)
    gc.collect()
    assert len(_stat_timer.timer.stats()) == before


def test_many_threads_lose_no_sample(stat_cls, events):
    """8 threads x 100k adds on one Stat give the exact count and sum."""
    stat = stat_cls("threads", [Aggregation.COUNT, Aggregation.SUM], HOUR)
    per_thread = 100_000

    def work(value: float) -> None:
        add = stat.add
        for _ in range(per_thread):
            add(value)

    threads = [threading.Thread(target=work, args=(float(i + 1),)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stat.close()
    assert events.of("threads") == [
        {"threads.count": 8.0 * per_thread, "threads.sum": float(per_thread * sum(range(1, 9)))}
    ]


def test_a_window_ends_on_time_without_another_add(stat_cls, events, clock):
    """A 1-second window is logged by the timer even though no add follows."""
    stat = stat_cls("ontime", [Aggregation.COUNT, Aggregation.VALUE], timedelta(seconds=1))
    stat.add(3)
    clock.advance(0.5)
    assert events.of("ontime") == []
    clock.advance(0.5)
    assert events.of("ontime") == [{"ontime.count": 1.0, "ontime.value": 3.0}]
    assert stat.count == 0
    assert stat.get() == {Aggregation.COUNT: 1.0, Aggregation.VALUE: 3.0}
    stat.close()


def test_a_capped_window_reopens_at_its_wall_clock_end(stat_cls, events, clock):
    """After max_samples, adds count again once the window's wall-clock end has passed."""
    stat = stat_cls("reopen", [Aggregation.COUNT], timedelta(seconds=1), max_samples=1)
    stat.add(1)
    stat.add(1)  # discarded: the window is capped until its end
    clock.advance(1)
    stat.add(1)
    clock.advance(1)
    assert events.of("reopen") == [{"reopen.count": 1.0}] * 2
    stat.close()


def test_one_timer_thread_serves_all_stats(stat_cls):
    """Many Stats share a single timer thread."""
    stats = [stat_cls(f"many{i}", [Aggregation.MEAN], timedelta(seconds=1 + i)) for i in range(20)]
    for stat in stats:
        stat.add(1)
    names = [t.name for t in threading.enumerate() if t.name == _stat_timer.TIMER_THREAD_NAME]
    assert names == [_stat_timer.TIMER_THREAD_NAME]
    for stat in stats:
        stat.close()


def test_closed_stats_do_not_pile_up_in_the_timer(stat_cls):
    """The timer forgets closed Stats: its queue stays proportional to the live ones."""
    keep = stat_cls("kept", [Aggregation.MEAN], HOUR)
    before = len(_stat_timer.timer._heap)
    for i in range(1000):
        stat_cls(f"brief{i}", [Aggregation.MEAN], HOUR).close()
    assert keep in _stat_timer.timer.stats()
    assert len(_stat_timer.timer._heap) <= 2 * (before + 1) + 64
    keep.close()
    assert keep not in _stat_timer.timer.stats()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_restarts_the_timer_and_drops_the_parents_samples(stat_cls, events, clock):
    """In a child, the first add restarts the timer; the parent's pending samples stay the parent's."""
    stat = stat_cls("forked", [Aggregation.COUNT, Aggregation.SUM], timedelta(seconds=1))
    stat.add(100)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report what its own window logs, then leave without cleanup
        status = 1
        try:
            os.close(read_end)
            events.all.clear()  # what the parent collected before the fork
            stat.add(5)
            timers = [t for t in threading.enumerate() if t.name == _stat_timer.TIMER_THREAD_NAME]
            clock.advance(1)
            logged = events.of("forked")
            os.write(write_end, repr((len(timers), logged)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        report = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert report == repr((1, [{"forked.count": 1.0, "forked.sum": 5.0}]))
    clock.advance(1)
    assert events.of("forked") == [{"forked.count": 1.0, "forked.sum": 100.0}]
    stat.close()


def test_pure_python_env_var_forces_the_fallback():
    """TB_MONITOR_PURE_PYTHON=1 makes Stat(...) build the pure-Python implementation."""
    code = (
        "from datetime import timedelta; import tb_monitor as t; from tb_monitor import _accumulators; "
        "s = t.Stat('x', [t.Aggregation.MEAN], timedelta(hours=1)); "
        "print(type(s).__name__, isinstance(s, _accumulators.PyAccumulator))"
    )
    env = {**os.environ, "TB_MONITOR_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Stat True"


def test_stats_work_without_the_c_extension():
    """When the C accelerator cannot be imported, Stat falls back to pure Python and works."""
    code = (
        "import sys; sys.modules['tb_monitor._accumulator'] = None\n"  # makes its import fail
        "from datetime import timedelta; import tb_monitor as t\n"
        "t.register_event_handler(lambda e: print(e.data))\n"
        "with t.Stat('x', [t.Aggregation.SUM], timedelta(hours=1)) as s:\n"
        "    s.add(2); s.add(3)\n"
        "print(type(s).__name__, isinstance(s, t._accumulators.PyAccumulator))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["{'x.sum': 5.0}", "Stat True"]

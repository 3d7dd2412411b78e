"""Tensors as values: Stat.add and put_metric take one-element tensors and never sync the caller."""

from __future__ import annotations

import math
import threading
from datetime import timedelta

import pytest
from conftest import need
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tb_monitor
from tb_monitor import Aggregation, register_event_handler, unregister_event_handler
from tb_monitor.contract import STAT_EVENT
from tb_monitor.elastic.metrics import put_metric
from tb_monitor.testing import capture, manual_clock, stat_implementations

torch = need("torch")

WINDOW = timedelta(seconds=10)
ALL = list(Aggregation)


@pytest.fixture(params=["c", "python"])
def stat_cls(request):
    """Each Stat implementation in turn; the C one must be built when CI=true."""
    implementation = stat_implementations()[request.param]
    if implementation is None:
        need("tb_monitor._accumulator")
        pytest.skip("the C accelerator is built but disabled on this interpreter")
    return implementation


class Windows:
    """The Stat windows logged while it is registered, by Stat name."""

    def __init__(self) -> None:
        self.by_stat: dict[str, list[dict]] = {}

    def __call__(self, event) -> None:
        if event.name == STAT_EVENT:
            name = next(iter(event.data)).rsplit(".", 1)[0]
            self.by_stat.setdefault(name, []).append(dict(event.data))


@pytest.fixture
def windows():
    """Every Stat window logged during the test."""
    collected = Windows()
    handle = register_event_handler(collected)
    yield collected
    unregister_event_handler(handle)


def _same(a: list[dict], b: list[dict]) -> bool:
    """Equal window by window, NaN equal to NaN."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.keys() != y.keys():
            return False
        for k in x:
            if not (x[k] == y[k] or (math.isnan(x[k]) and math.isnan(y[k]))):
                return False
    return True


values = st.floats(allow_nan=True, allow_infinity=True, width=64)
samples = st.lists(st.tuples(values, st.booleans(), st.booleans()), min_size=1, max_size=40)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(samples=samples, max_samples=st.integers(min_value=1, max_value=50))
def test_tensors_aggregate_exactly_as_the_floats_they_hold(stat_cls, windows, samples, max_samples):
    """Any mix of floats and float64 tensors, window ends and caps included, logs the same
    windows as the same floats."""
    with manual_clock() as clock:
        name = f"prop{id(samples)}"
        as_floats = stat_cls(f"{name}f", ALL, WINDOW, max_samples=max_samples)
        as_tensors = stat_cls(f"{name}t", ALL, WINDOW, max_samples=max_samples)
        for value, is_tensor, window_ends in samples:
            as_floats.add(value)
            as_tensors.add(torch.tensor(value, dtype=torch.float64) if is_tensor else value)
            if window_ends:
                clock.advance(10)
        clock.advance(0)  # capped windows with tensors are logged off the caller's thread
        as_floats.close()
        as_tensors.close()
    strip = lambda ws, s: [{k.split(".", 1)[1]: v for k, v in w.items()} for w in ws]  # noqa: E731
    assert _same(
        strip(windows.by_stat.get(f"{name}f", []), f"{name}f"),
        strip(windows.by_stat.get(f"{name}t", []), f"{name}t"),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor(2.5),
        lambda: torch.tensor([2.5]),
        lambda: torch.tensor(2.5, dtype=torch.bfloat16),
        lambda: torch.tensor(2.5, requires_grad=True) * 1,
        lambda: torch.tensor(True),
        lambda: torch.tensor(3, dtype=torch.int32),
    ],
    ids=["0-dim", "shape-1", "bfloat16", "requires-grad", "bool", "int32"],
)
def test_any_one_element_real_tensor_counts_as_its_number(make, windows):
    """0-dim or shape [1], any real dtype, with or without grad: the window holds its value."""
    tensor = make()
    with manual_clock() as clock:
        stat = tb_monitor.Stat("kinds", [Aggregation.SUM, Aggregation.COUNT], WINDOW)
        stat.add(tensor)
        assert stat.count == 1
        clock.advance(10)
        stat.close()
    assert windows.by_stat["kinds"] == [{"kinds.sum": float(tensor.item()), "kinds.count": 1.0}]


def test_a_tensor_of_several_elements_is_refused_naming_stat_and_shape(stat_cls):
    """Stat.add of a 2x2 tensor is a ValueError naming the Stat and the shape; earlier samples stay."""
    with stat_cls("shapes", [Aggregation.SUM], WINDOW) as stat:
        stat.add(torch.tensor(1.0))
        with pytest.raises(ValueError, match=r"Stat 'shapes'.*\(2, 2\)"):
            stat.add(torch.ones(2, 2))
        assert stat.count == 1


def test_a_complex_tensor_is_refused(stat_cls):
    """A complex tensor is a TypeError naming the Stat and the dtype."""
    with (
        stat_cls("cplx", [Aggregation.SUM], WINDOW) as stat,
        pytest.raises(TypeError, match="Stat 'cplx'.*complex"),
    ):
        stat.add(torch.tensor(1 + 2j))


def test_put_metric_takes_a_tensor_and_writes_its_value():
    """put_metric(name, tensor) lands as the scalar the tensor holds, with its own step."""
    with capture() as captured:
        for i in range(3):
            put_metric("loss", torch.tensor(i / 4), "train")
    assert [(p.step, p.value) for p in captured.scalars("train/loss")] == [
        (0, 0.0),
        (1, 0.25),
        (2, 0.5),
    ]


def test_put_metric_of_several_elements_names_the_metric():
    """put_metric of a tensor with 3 elements is a ValueError naming the tag and shape."""
    with capture(), pytest.raises(ValueError, match=r"'train/bad'.*\(3,\)"):
        put_metric("bad", torch.ones(3), "train")


# -- no synchronisation on the caller's thread ---------------------------------------------

_SYNCING = {
    "item",
    "tolist",
    "cpu",
    "numpy",
    "__float__",
    "__int__",
    "__bool__",
    "__index__",
    "to",
    "__format__",
    "__repr__",
    "__str__",
}


class Spy(torch.Tensor):
    """A tensor that records every call that would read its value back, and on which thread."""

    reads: list[tuple[str, int]] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in _SYNCING:
            cls.reads.append((name, threading.get_ident()))
        return super().__torch_function__(func, types, args, kwargs or {})


def _spy(value: float) -> Spy:
    return torch.tensor(value, dtype=torch.float32).as_subclass(Spy)


def test_stat_add_and_put_metric_never_read_a_tensor_on_the_callers_thread():
    """No value read on the calling thread for Stat.add or put_metric; every value still lands."""
    Spy.reads.clear()
    caller = threading.get_ident()
    with manual_clock() as clock, capture() as captured:
        stat = tb_monitor.Stat("spied", [Aggregation.SUM, Aggregation.COUNT], WINDOW)
        for i in range(5):
            stat.add(_spy(i))
            put_metric("spied", _spy(i), "m")
        on_caller = [name for name, thread in Spy.reads if thread == caller]
        assert on_caller == []
        clock.advance(10)
        stat.close()
    assert [p.value for p in captured.scalars("spied.sum")] == [10.0]
    assert [p.value for p in captured.scalars("m/spied")] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_importing_tb_monitor_does_not_import_torch():
    """torch is imported only by the user: tb_monitor never imports it for a plain float."""
    import subprocess
    import sys

    code = (
        "import sys, tb_monitor; from datetime import timedelta\n"
        "s = tb_monitor.Stat('x', [tb_monitor.Aggregation.SUM], timedelta(hours=1)); s.add(1.0)\n"
        "s.close(); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr

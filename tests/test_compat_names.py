"""Every public name of PyTorch's telemetry modules exists in ours, so porting is an import change."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from conftest import need

import tb_monitor

# (torch module, ours); names torch imports for itself (typing, stdlib modules) are not its API.
MODULES = [
    ("torch.monitor", "tb_monitor"),
    ("torch.distributed.elastic.metrics", "tb_monitor.elastic.metrics"),
    ("torch.distributed.elastic.metrics.api", "tb_monitor.elastic.metrics.api"),
    ("torch.distributed.elastic.events", "tb_monitor.elastic.events"),
    ("torch.distributed.elastic.events.api", "tb_monitor.elastic.events.api"),
    ("torch.distributed.elastic.events.handlers", "tb_monitor.elastic.events.handlers"),
]
_STDLIB = {"typing", "collections", "abc", "functools", "dataclasses", "enum"}
_NOT_API = {"TYPE_CHECKING", "Optional", "Union", "Any", "Callable", "annotations", "deprecated"}


def _api(module) -> set[str]:
    names = set()
    for name in dir(module):
        if name.startswith("__") or name in _NOT_API:
            continue
        value = getattr(module, name)
        if type(value).__name__ == "module" and name not in ("api", "handlers"):
            continue  # modules torch imported for itself (os, abc, logging, ...)
        if getattr(value, "__module__", "").split(".")[0] in _STDLIB:
            continue  # typing helpers, namedtuple/abc machinery imported by torch
        if name.startswith("_") and not name.startswith(("_WaitCounter",)):
            continue  # torch's private helpers, except the ones its own tests import
        names.add(name)
    return names


@pytest.mark.parametrize(("theirs", "ours"), MODULES, ids=[m for m, _ in MODULES])
def test_every_public_name_of_torchs_module_exists_in_ours(theirs, ours):
    """No public name of the torch module is missing from its tb_monitor counterpart."""
    need("torch")
    torch_module = importlib.import_module(theirs)
    our_module = importlib.import_module(ours)
    missing = sorted(n for n in _api(torch_module) if not hasattr(our_module, n))
    assert missing == []


def test_module_level_aggregations_are_the_enum_members():
    """tb_monitor.MEAN and friends are Aggregation members, as torch.monitor exports them."""
    assert [tb_monitor.VALUE, tb_monitor.MEAN, tb_monitor.COUNT] == [
        tb_monitor.Aggregation.VALUE,
        tb_monitor.Aggregation.MEAN,
        tb_monitor.Aggregation.COUNT,
    ]
    assert tb_monitor.STAT_EVENT == "torch.monitor.Stat"


def test_wait_counter_guard_times_each_unit_into_a_stat_window():
    """Each guard() of a _WaitCounter adds its duration to the Stat 'wait/<key>'."""
    from tb_monitor.testing import capture, manual_clock

    with manual_clock() as clock, capture() as captured:
        counter = tb_monitor._WaitCounter("ckpt.save")
        for _ in range(3):
            with counter.guard():
                pass
        clock.advance(timedelta(seconds=60).total_seconds())
    assert [p.value for p in captured.scalars("wait/ckpt.save.count")] == [3.0]
    assert captured.scalars("wait/ckpt.save.max")[0].value >= 0.0


def test_initialize_metrics_accepts_a_config_and_refuses_anything_else():
    """initialize_metrics(MetricsConfig()) is a no-op as in torch; another type is a TypeError."""
    from tb_monitor.elastic import metrics

    assert metrics.initialize_metrics(metrics.MetricsConfig({"a": "b"})) is None
    assert metrics.initialize_metrics() is None
    with pytest.raises(TypeError, match="'nope'"):
        metrics.initialize_metrics("nope")

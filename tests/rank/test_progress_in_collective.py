"""A rank's progress as its pulse carries it says since when it is inside a collective, DDP's
constructor collectives included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from conftest import need

from tb_monitor.rank.health import SETUP_COLLECTIVES, RankHealth

pytestmark = pytest.mark.torch


def test_progress_inside_a_collective_says_since_when(monkeypatch):
    """Read inside a wrapped ``barrier``, progress says when it was entered; after it, None."""
    need("torch")
    import torch.distributed as dist

    seen = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: seen.append(health.progress()))
    health = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
    try:
        dist.barrier()
        after = health.progress()
    finally:
        health.close()
    assert seen[0].in_collective_since is not None and after.in_collective_since is None


def test_ddp_constructor_collectives_are_wrapped():
    """DDP's shape check and broadcast, called from Python, pass through the wrapper."""
    need("torch")
    import torch.distributed as dist

    health = RankHealth(window=timedelta(hours=1), heartbeat_s=3600).install()
    try:
        wrapped = [hasattr(getattr(dist, n), "__tb_monitor_timed__") for n in SETUP_COLLECTIVES]
    finally:
        health.close()
    assert wrapped == [True, True]

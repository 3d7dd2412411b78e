"""The Timeline tab draws imported Flight Recorder dumps (``tb-monitor import-fr``): one lane
per rank, each collective an interval, the one still running open."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from fr_dumps import two_groups_one_behind
from plugin_helpers import column, lanes, refreshed_store

from tb_monitor.fr_import import import_dumps
from tb_plugin.query import timeline_payload
from tb_plugin.requests import Query


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    """The payload of a logdir holding the four ranks' imported dumps."""
    root = tmp_path_factory.mktemp("fr")
    (root / "dumps").mkdir()
    for rank, dump in two_groups_one_behind().items():
        (root / "dumps" / f"fr_trace_{rank}").write_bytes(pickle.dumps(dump))
    import_dumps(str(root / "dumps"), str(root / "logs"))
    return timeline_payload(refreshed_store(str(root / "logs")).snapshot(), Query())


def test_each_ranks_collectives_are_intervals_on_its_own_lane(payload):
    """Four lanes, one per rank; as many intervals on each as the rank's dump has entries."""
    labels = [lane["label"] for lane in lanes(payload)]
    assert sorted(labels) == ["rank-0", "rank-1", "rank-2", "rank-3"]
    on_lane = np.bincount(column(payload, "intervals", "lane", "<u4"), minlength=len(labels))
    counts = {label: int(on_lane[i]) for i, label in enumerate(labels)}
    assert counts == {"rank-0": 4, "rank-1": 4, "rank-2": 4, "rank-3": 3}


def test_a_collective_that_never_completed_is_drawn_open(payload):
    """The collectives rank 3 never joined are open on ranks 0 to 2, none on rank 3."""
    labels = [lane["label"] for lane in lanes(payload)]
    iv_lane = column(payload, "intervals", "lane", "<u4")
    iv_open = column(payload, "intervals", "open", "<u2").astype(bool)
    assert sorted(labels[lane] for lane in iv_lane[iv_open]) == ["rank-0", "rank-1", "rank-2"]

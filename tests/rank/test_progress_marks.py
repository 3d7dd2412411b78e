"""Progress marks inside a rank: a batch fetched and a checkpoint save move them, installed once
and put back on close; a module imported later is wrapped as it loads."""

from __future__ import annotations

import itertools
import sys

import pytest
from conftest import need

from tb_monitor.rank.progress_marks import ProgressMarks, when_imported

pytestmark = pytest.mark.torch


@pytest.fixture
def marks():
    """Installed marks on a clock that ticks one second a read."""
    need("torch")
    installed = ProgressMarks(itertools.count().__next__).install()
    yield installed
    installed.close()


def test_a_batch_fetched_from_a_dataloader_is_progress(marks):
    """Each batch a DataLoader hands out reads the clock into ``at``."""
    from torch.utils.data import DataLoader

    before = marks.at
    next(iter(DataLoader(list(range(8)), batch_size=4)))
    assert marks.at > before


def test_inside_torch_save_the_rank_is_saving(marks, tmp_path):
    """While ``torch.save`` runs, ``in_save_s`` counts; once it returns it is 0 and ``at`` moved."""
    import torch

    seen = []

    class Probe:
        def __reduce__(self):
            seen.append(marks.in_save_s(100.0))
            return (int, (0,))

    torch.save(Probe(), tmp_path / "probe.pt")
    assert seen[0] > 0 and marks.in_save_s(100.0) == 0.0 and marks.at > 0


def test_close_puts_back_what_install_wrapped():
    """After ``close`` torch.save and the DataLoader iterator are torch's own again."""
    torch = need("torch")
    from torch.utils.data import dataloader

    save, fetch = torch.save, dataloader._BaseDataLoaderIter.__next__
    installed = ProgressMarks(itertools.count().__next__).install()
    wrapped = torch.save is not save
    installed.close()
    assert wrapped and torch.save is save
    assert dataloader._BaseDataLoaderIter.__next__ is fetch


def test_a_module_imported_later_is_handed_over_as_it_loads(tmp_path, monkeypatch):
    """``when_imported`` calls back once the module runs, before its importer gets it."""
    (tmp_path / "later_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    got = []
    undo = when_imported("later_module", lambda module: got.append(module.VALUE))
    try:
        import later_module  # noqa: F401
    finally:
        undo()
        sys.modules.pop("later_module", None)
    assert got == [1]

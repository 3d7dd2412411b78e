"""NCCL's own Flight Recorder (CUDA builds: ``_dump_nccl_trace_json``, ``_dump_nccl_trace``),
read for every process group. Skipped without CUDA and NCCL; on CPU the same code reads gloo's
entries from the generic recorder (test_rank_health_flight_recorder.py,
test_flight_recorder_import.py)."""

from __future__ import annotations

import pytest

from tb_monitor.analysis.flight_recorder import group_verdicts
from tb_monitor.analysis.fr_records import parse_dump
from tb_monitor.rank._cuda_capture import thread_local_capture_mode
from tb_monitor.rank._flight_recorder import last_collective_seq, newest_by_group, read_trace


@pytest.fixture
def nccl_groups(torch, tmp_path, monkeypatch):
    """One NCCL rank on GPU 0 with a subgroup ("tp"): one all_reduce on the default group, two
    on the subgroup; yields torch.distributed and the subgroup."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("needs NCCL")
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        tp = dist.new_group([0], group_desc="tp")
        tensor = torch.ones(4, device="cuda")
        dist.all_reduce(tensor)
        for _ in range(2):
            dist.all_reduce(tensor, group=tp)
        torch.cuda.synchronize()
        assert thread_local_capture_mode()  # as the heartbeat thread reads it
        yield dist, tp
    finally:
        dist.destroy_process_group()


def test_nccls_recorder_is_read_for_every_group(nccl_groups, torch):
    """The merged trace holds NCCL's entries of the default group and the subgroup: one more
    all_reduce on the subgroup moves its newest collective only."""
    trace = read_trace()
    before = {desc: seq for (_, desc), seq in newest_by_group(trace).items()}
    assert any(e["profiling_name"].startswith("nccl:") for e in trace["entries"])
    dist, tp = nccl_groups
    dist.all_reduce(torch.ones(4, device="cuda"), group=tp)
    torch.cuda.synchronize()
    after = {desc: seq for (_, desc), seq in newest_by_group(read_trace()).items()}
    assert (after["tp"], after["default_pg"]) == (before["tp"] + 1, before["default_pg"])
    assert last_collective_seq() == after["default_pg"]


def test_nccls_pickled_dump_gives_each_groups_verdict(nccl_groups, torch):
    """The dump torch writes on a timeout (``_dump_nccl_trace``), read as an imported one:
    both groups, their members from NCCL's pg_config, nobody behind."""
    from torch._C._distributed_c10d import _dump_nccl_trace

    verdicts = group_verdicts({0: parse_dump(_dump_nccl_trace())})
    by_desc = {v.desc: v for v in verdicts}
    assert {"default_pg", "tp"} <= set(by_desc)
    assert all(v.ranks == (0,) and v.lagging == () for v in by_desc.values())

"""``tb-monitor import-fr`` on the dumps of a real 4-rank gloo job (tests/integration/scripts/
fr_groups.py: two subgroups, rank 3 skipping its group's last all_reduce), from a directory and
from s3:// (SeaweedFS): each rank's collectives on its own Timeline lane, and the report naming
the rank behind in its group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from torchrun_jobs import tb_monitor_command

from tb_monitor import timeline
from tb_monitor.analysis.sources import timeline_rows

SCRIPT = Path(__file__).parent / "scripts" / "fr_groups.py"
JOB_TIMEOUT_S = 120


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tb_monitor_command(*args), capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """The job's four dumps, as torch names them (``fr_trace_<rank>``), in one directory."""
    pytest.importorskip("torch")
    where = tmp_path_factory.mktemp("fr") / "dumps"
    where.mkdir()
    env = {
        **os.environ,
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_FR_DUMP_TEMP_FILE": f"{where}/fr_trace_",
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "4", str(SCRIPT)]
    for attempt in ("first", "second"):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
        )
        if done.returncode == 0:
            return where
        # The workers' own words come first, torchrun's summary of them last.
        said = f"{done.stderr[:3000]}\n...\n{done.stderr[-1200:]}"
        if attempt == "first":  # the dumps are this test's input, made by plain torchrun
            warnings.warn(f"the dumping job failed, run again:\n{said}", stacklevel=1)
    raise AssertionError(f"the dumping job failed twice:\n{said}")


def _lanes(logdir: str) -> dict[str, list[timeline.Span]]:
    out: dict[str, list[timeline.Span]] = {}
    for span in timeline.spans(timeline_rows(logdir)):
        if span.end is not None:
            out.setdefault(span.lane.label, []).append(span)
    return out


def _behind(logdir: str) -> dict[str, list[int]]:
    done = _cli("report", logdir, "--json")
    return {g["desc"]: g["lagging"] for g in json.loads(done.stdout)["flight_recorder"]}


@pytest.mark.slow
def test_import_draws_each_ranks_collectives_on_its_own_lane(dumps, tmp_path):
    """One lane per rank, each collective an interval; rank 2's all_reduce that rank 3 skipped
    is open, none of rank 3's in that group."""
    logdir = str(tmp_path / "logs")
    assert _cli("import-fr", str(dumps), logdir).returncode == 0
    lanes = _lanes(logdir)
    assert sorted(lanes) == ["rank-0", "rank-1", "rank-2", "rank-3"]
    assert all(len(spans) == (7 if lane != "rank-3" else 6) for lane, spans in lanes.items())
    # Ranks 0 and 1 may dump before counting tp_a's async all_reduce: only tp_b is asserted.
    still_open = {
        lane: [s.label for s in spans if s.open and "tp_b" in s.label]
        for lane, spans in lanes.items()
    }
    assert still_open["rank-2"] == ["gloo:all_reduce #4 (tp_b)"] and still_open["rank-3"] == []


@pytest.mark.slow
def test_the_report_names_the_rank_behind_in_its_group(dumps, tmp_path):
    """Rank 3 is behind in tp_b, and no rank in tp_a or the default group."""
    logdir = str(tmp_path / "logs")
    assert _cli("import-fr", str(dumps), logdir).returncode == 0
    assert _behind(logdir) == {"default_pg": [], "tp_a": [], "tp_b": [3]}


@pytest.mark.slow
def test_import_from_s3_into_s3_draws_the_same(dumps, s3_bucket):
    """Dumps under an s3:// prefix, imported into an s3:// logdir: the same lanes and verdict."""
    import fsspec

    store = fsspec.filesystem("s3")
    for path in sorted(dumps.iterdir()):
        store.pipe_file(f"{s3_bucket}/job/dumps/{path.name}"[len("s3://") :], path.read_bytes())
    logdir = f"{s3_bucket}/job/logs"
    done = _cli("import-fr", f"{s3_bucket}/job/dumps", logdir)
    assert done.returncode == 0, done.stderr
    assert sorted(_lanes(logdir)) == ["rank-0", "rank-1", "rank-2", "rank-3"]
    assert _behind(logdir)["tp_b"] == [3]

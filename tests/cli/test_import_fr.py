"""``tb-monitor import-fr DUMPS LOGDIR``: hand-built dumps (tests/fr_dumps.py) imported, the
verdict printed and in ``tb-monitor report``; bad input is exit code 2."""

from __future__ import annotations

import json
import pickle

from fr_dumps import two_groups_one_behind

from tb_monitor.cli import main as cli_main


def _dumps_dir(tmp_path):
    where = tmp_path / "dumps"
    where.mkdir()
    for rank, dump in two_groups_one_behind().items():
        (where / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    return where


def test_import_fr_prints_the_rank_behind_per_group(tmp_path, capsys, torch):
    """The import's output names rank 3 behind in group 2 and the others in step."""
    assert cli_main(["import-fr", str(_dumps_dir(tmp_path)), str(tmp_path / "logs")]) == 0
    out = capsys.readouterr().out
    assert "group 2 (pp), ranks 2, 3: rank 3 behind: rank 3 at 2, the others at 3" in out
    assert "group 1 (tp), ranks 0, 1: in step at collective 3" in out


def test_the_report_of_the_logdir_has_the_flight_recorder_section(tmp_path, capsys, torch):
    """``report`` on the logdir shows the same verdict, its text and its JSON."""
    logdir = str(tmp_path / "logs")
    cli_main(["import-fr", str(_dumps_dir(tmp_path)), logdir])
    capsys.readouterr()
    cli_main(["report", logdir])
    assert "rank 3 behind" in capsys.readouterr().out
    cli_main(["report", logdir, "--json"])
    groups = json.loads(capsys.readouterr().out)["flight_recorder"]
    assert [(g["group"], g["lagging"]) for g in groups] == [("0", []), ("1", []), ("2", [3])]


def test_import_fr_of_a_directory_without_dumps_is_exit_2(tmp_path, capsys):
    """No file named <prefix><rank>: one line on stderr naming the directory, exit code 2."""
    (tmp_path / "notes.txt").write_text("nothing here")
    assert cli_main(["import-fr", str(tmp_path), str(tmp_path / "logs")]) == 2
    assert f"no Flight Recorder dumps in {tmp_path}" in capsys.readouterr().err


def test_import_fr_of_a_missing_directory_is_exit_2(tmp_path, capsys):
    """A DUMPS that does not exist: exit code 2, naming it."""
    assert cli_main(["import-fr", str(tmp_path / "gone"), str(tmp_path / "logs")]) == 2
    assert "does not exist" in capsys.readouterr().err

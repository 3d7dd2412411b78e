"""Every command refuses a malformed logdir URL in one line, exit 2, creating nothing."""

from __future__ import annotations

import pytest
from conftest import need

from tb_monitor.cli import main


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--follow", "s3:/bucket/run"],
        ["run", "--logdir", "s3:/bucket/run", "--standalone", "train.py"],
        ["demo", "--logdir", "gs:///x", "--no-serve"],
    ],
    ids=["report-follow", "run", "demo"],
)
def test_a_malformed_logdir_url_is_one_line_and_exit_2(command, tmp_path, monkeypatch, capsys):
    """report --follow, run and demo with 's3:/bucket/run' or 'gs:///x': one line naming the
    value, exit 2, and no local directory 's3:' (--follow does not wait for it forever)."""
    need("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    url = command[command.index("--logdir") + 1] if "--logdir" in command else command[-1]
    code = main(command)
    lines = capsys.readouterr().err.splitlines()
    assert code == 2 and len(lines) == 1 and f"'{url}'" in lines[0]
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]

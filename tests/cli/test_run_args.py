"""How ``tb-monitor run`` splits its own ``--logdir`` from what it hands torchrun."""

from __future__ import annotations

import pytest
from conftest import need

from tb_monitor.cli import run as run_command

pytestmark = pytest.mark.torch


@pytest.fixture
def script(tmp_path, monkeypatch):
    """An existing training script; no event handler chosen through the environment."""
    need("torch")
    monkeypatch.delenv("PET_EVENT_LOG_HANDLER", raising=False)
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def test_logdir_is_removed_and_the_scripts_own_arguments_kept(script, tmp_path):
    """--logdir before the script is ours; the same option after the script is the script's."""
    logdir, argv, _ = run_command._parse(
        ["--nnodes=1", "--logdir", str(tmp_path), script, "--logdir", "theirs"]
    )
    assert logdir == str(tmp_path)
    assert argv[-4:] == ["--nnodes=1", script, "--logdir", "theirs"]


@pytest.mark.parametrize("spelling", [["--logdir=runs"], ["--logd", "runs"]])
def test_logdir_spellings(script, spelling, tmp_path, monkeypatch):
    """``--logdir=DIR`` and an abbreviation argparse accepts are removed too; DIR made absolute."""
    monkeypatch.chdir(tmp_path)
    logdir, argv, _ = run_command._parse([*spelling, script])
    assert logdir == str(tmp_path / "runs")
    assert not any(token.startswith("--logd") or token == "runs" for token in argv)


def test_tensorboard_destination_by_default(script, tmp_path):
    """Without a choice, the agent records its events to the "tensorboard" destination."""
    _, argv, destination = run_command._parse(["--logdir", str(tmp_path), script])
    assert destination == "tensorboard"
    assert argv[:2] == ["--event-log-handler", "tensorboard"]


def test_users_destination_is_kept(script, tmp_path):
    """A destination chosen on the command line is handed to torchrun unchanged."""
    _, argv, destination = run_command._parse(
        ["--logdir", str(tmp_path), "--event-log-handler", "console", script]
    )
    assert destination == "console"
    assert argv == ["--event-log-handler", "console", script]


def test_destination_from_environment(script, tmp_path, monkeypatch):
    """PET_EVENT_LOG_HANDLER chooses the destination as it does for torchrun."""
    monkeypatch.setenv("PET_EVENT_LOG_HANDLER", "console")
    _, argv, destination = run_command._parse(["--logdir", str(tmp_path), script])
    assert destination == "console" and argv == [script]


def test_unknown_destination_is_a_usage_error(script, tmp_path, capsys):
    """A destination torchelastic does not know fails before the agent starts, naming it."""
    assert run_command.main(["--logdir", str(tmp_path), "--event-log-handler", "nope", script]) == 2
    assert "unknown --event-log-handler 'nope'" in capsys.readouterr().err

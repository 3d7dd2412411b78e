"""Switches read from the environment (``tb_monitor._env.flag``)."""

from __future__ import annotations

import logging

import pytest

from tb_monitor import _env


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("Yes", True), ("ON", True)]
    + [("0", False), ("False", False), ("no", False), (" off ", False)],
)
def test_a_switch_is_read_in_any_of_its_spellings_and_cases(monkeypatch, raw, expected):
    """1/true/yes/on and 0/false/no/off, any case, override the default either way."""
    monkeypatch.setenv("TB_MONITOR_SWITCH", raw)
    assert _env.flag("TB_MONITOR_SWITCH", not expected) is expected


def test_an_unset_or_empty_switch_keeps_the_default(monkeypatch):
    """No value is no choice: the default holds, with no warning."""
    monkeypatch.delenv("TB_MONITOR_SWITCH", raising=False)
    assert _env.flag("TB_MONITOR_SWITCH", True) is True
    monkeypatch.setenv("TB_MONITOR_SWITCH", "")
    assert _env.flag("TB_MONITOR_SWITCH", False) is False


def test_a_bad_switch_warns_naming_it_and_keeps_the_default(monkeypatch, caplog):
    """A typo is a warning naming the variable and its value, never an error."""
    monkeypatch.setenv("TB_MONITOR_SWITCH", "enabled")
    with caplog.at_level(logging.WARNING, logger="tb_monitor"):
        assert _env.flag("TB_MONITOR_SWITCH", True) is True
    assert "TB_MONITOR_SWITCH" in caplog.text and "'enabled'" in caplog.text

"""Switches read from the environment (``tb_monitor._env.flag``)."""

from __future__ import annotations

import logging

import pytest
from conftest import need

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


def test_a_built_c_twin_is_found_by_module_and_name(monkeypatch):
    """``c_twin`` gives the C extension's callable where it is built and not switched off."""
    monkeypatch.delenv("TB_MONITOR_PURE_PYTHON", raising=False)
    steps_index = need("tb_monitor.contract._columnar_index").steps_index
    assert _env.c_twin("tb_monitor.contract._columnar_index", "steps_index") is steps_index


@pytest.mark.parametrize(
    ("module", "name"),
    [("tb_monitor._no_such_extension", "anything"), ("tb_monitor.contract", "no_such_name")],
)
def test_a_c_twin_not_built_is_none(monkeypatch, module, name):
    """A module that is not built, or built without the name, leaves the Python twin: None."""
    monkeypatch.delenv("TB_MONITOR_PURE_PYTHON", raising=False)
    assert _env.c_twin(module, name) is None


def test_pure_python_turns_every_c_twin_off(monkeypatch):
    """``TB_MONITOR_PURE_PYTHON=1`` makes even a built C twin None."""
    need("tb_monitor.contract._columnar_index")
    monkeypatch.setenv("TB_MONITOR_PURE_PYTHON", "1")
    assert _env.c_twin("tb_monitor.contract._columnar_index", "steps_index") is None

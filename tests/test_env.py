"""Settings read from the environment (``tb_monitor._env``), and the one table declaring them."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from conftest import need

import tb_monitor
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


_NAME = re.compile(r"TB_MONITOR_[A-Z0-9_]*[A-Z0-9]")
#: A reader with a literal default: ``_env.seconds("TB_MONITOR_X", 5.0)``, ``flag(..., True)``.
_READ = re.compile(r'_env\.(seconds|flag)\(\s*"(TB_MONITOR_\w+)",\s*(True|False|[0-9.]+)\s*\)')


def _sources() -> list[Path]:
    """The package's files a variable can be read or named in (Python, C, the frontend), where
    the packages are imported from: the checkout, or an installed wheel (``.ci/wheels``)."""
    import tb_plugin

    return [
        path
        for package in (tb_monitor, tb_plugin)
        for path in sorted(Path(package.__file__).parent.rglob("*"))
        if path.suffix in (".py", ".c", ".js") and "__pycache__" not in path.parts
    ]


def test_every_variable_the_package_names_is_declared():
    """Each ``TB_MONITOR_*`` name in tb_monitor/ or tb_plugin/ has a row in ``_env.VARIABLES``."""
    declared = {variable.name for variable in _env.VARIABLES}
    named = {name for path in _sources() for name in _NAME.findall(path.read_text())}
    assert sorted(named - declared) == []


def test_every_declared_variable_is_read_somewhere():
    """No row of ``_env.VARIABLES`` outlives the code that read it."""
    env_py = Path(_env.__file__)
    texts = [path.read_text() for path in _sources() if path != env_py]
    assert [v.name for v in _env.VARIABLES if not any(v.name in text for text in texts)] == []


def test_each_variable_is_declared_once_with_a_meaning():
    """One row per name, each with a default, a reader and what it changes."""
    names = [variable.name for variable in _env.VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.default and v.read_by and v.meaning for v in _env.VARIABLES)


def test_a_literal_default_in_the_code_is_the_declared_one():
    """Where a reader passes its default as a literal, the table says the same default."""
    declared = {variable.name: variable.default for variable in _env.VARIABLES}
    spelled = {"True": "1", "False": "0"}
    found = [
        (name, spelled[default] if default in spelled else f"{float(default):g}", declared[name])
        for path in _sources()
        for _, name, default in _READ.findall(path.read_text())
    ]
    assert found and [(name, code) for name, code, table in found if code != table] == []

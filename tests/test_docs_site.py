"""The documentation site builds with ``mkdocs build --strict``: a broken link, a stale reference
or a docstring mkdocstrings cannot read fails it, and the generated pages follow the code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

from tb_monitor._env import VARIABLES
from tb_monitor.cli import _COMMANDS

ROOT = Path(__file__).resolve().parent.parent

#: Each test builds the whole site (mkdocs and mkdocstrings): out of the fast lane.
pytestmark = pytest.mark.slow


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of ``config`` into ``site``, this checkout first on the path."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole site, built once for the module's tests."""
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        need(module)
    out = tmp_path_factory.mktemp("site")
    done = _build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def test_the_site_builds_strict_without_a_warning(site):
    """Every page of the nav is built, with no warning (``--strict`` would have failed on one)."""
    assert (site / "index.html").is_file() and (site / "DESIGN" / "index.html").is_file()


def test_the_cli_page_has_every_commands_help(site):
    """Each ``tb-monitor`` command has its ``--help``, as the code printed it at build time."""
    page = (site / "reference" / "cli" / "index.html").read_text()
    assert all(f"usage: tb-monitor {name}" in page for name in _COMMANDS)


def test_the_environment_page_lists_every_declared_variable(site):
    """The table is ``_env.VARIABLES``: every variable the package reads has its row."""
    page = (site / "reference" / "environment" / "index.html").read_text()
    assert [v.name for v in VARIABLES if f"<code>{v.name}</code>" not in page] == []


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The site's own settings turn a link to a page that does not exist into a failed build."""
    need("mkdocs")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the guide](guide/missing.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: {tmp_path / 'docs'}\nnav: [index.md]\n"
        "plugins: [search]\nhooks: []\nmarkdown_extensions: []\n"
    )
    done = _build(config, tmp_path / "site")
    assert done.returncode != 0 and "guide/missing.md" in done.stderr

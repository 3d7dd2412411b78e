"""MkDocs hook: the pages that must not go stale are generated at build time.

``<!-- generated: cli -->`` becomes each ``tb-monitor`` command's ``--help``, run from the
checkout being built; ``<!-- generated: environment -->`` becomes the table of
``tb_monitor._env.VARIABLES``, the one declaration of every variable the package reads. A
command that fails to print its help fails the build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def on_config(config: Any) -> Any:
    """Import the checkout being built, not whichever tb_monitor the environment installed."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Fill the page's generated sections in."""
    if "<!-- generated: cli -->" in markdown:
        markdown = markdown.replace("<!-- generated: cli -->", _cli())
    if "<!-- generated: environment -->" in markdown:
        markdown = markdown.replace("<!-- generated: environment -->", _environment())
    return markdown


def _help(*args: str) -> str:
    """``tb-monitor ARGS --help`` as this checkout prints it, at a fixed width."""
    env = {
        **os.environ,
        "COLUMNS": "100",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tb_monitor.cli", *args, "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.rstrip()


def _cli() -> str:
    from tb_monitor.cli import _COMMANDS

    parts = ["```text", _help(), "```"]
    for name, (_, summary) in _COMMANDS.items():
        parts += ["", f"## `tb-monitor {name}`", "", summary[:1].upper() + summary[1:] + ".", ""]
        parts += ["```text", _help(name), "```"]
    return "\n".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _environment() -> str:
    from tb_monitor._env import VARIABLES

    rows = ["| variable | default | read by | what it does |", "| --- | --- | --- | --- |"]
    rows += [
        f"| `{v.name}` | {_cell(v.default)} | {_cell(v.read_by)} | {_cell(v.meaning)} |"
        for v in VARIABLES
    ]
    return "\n".join(rows)

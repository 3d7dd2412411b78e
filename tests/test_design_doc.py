"""docs/DESIGN.md's module table agrees with the tree: every module has a row, every row a file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "DESIGN.md"
PACKAGES = ("tb_monitor", "tb_plugin")
#: What a row names: a module of either package, its C accelerators and headers, the frontend.
SUFFIXES = {".py", ".c", ".h", ".js", ".css"}


def _table_paths() -> set[str]:
    """The files and folders the module table's first column names, as paths from the root: a
    later name in a cell is read beside the first (``cli/export.py``, ``dom.js``)."""
    lines = DESIGN.read_text().splitlines()
    start = lines.index("| module | job |") + 2
    rows = lines[start : next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))]
    paths: set[str] = set()
    for line in rows:
        names = re.findall(r"`([^`]+)`", line.split("|")[1])
        first = names[0]
        paths.add(first)
        for name in names[1:]:
            if name.startswith(PACKAGES):
                paths.add(name)
            elif "/" in name:
                paths.add(f"{first.split('/')[0]}/{name}")
            else:
                paths.add(f"{first.rsplit('/', 1)[0]}/{name}")
    return paths


def _modules() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.suffix in SUFFIXES
        and path.name not in ("__init__.py", "__main__.py")
        and "__pycache__" not in path.parts
    }


def test_every_module_has_a_row():
    """Each module of the packages (C and frontend files too) is named in the module table."""
    named = _table_paths()
    folders = tuple(path for path in named if path.endswith("/"))
    assert sorted(m for m in _modules() if m not in named and not m.startswith(folders)) == []


def test_every_row_names_a_file_that_exists():
    """No row of the module table names a module that is gone or moved."""
    assert sorted(path for path in _table_paths() if not (ROOT / path).exists()) == []

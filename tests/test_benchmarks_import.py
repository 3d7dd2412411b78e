"""Every benchmark still imports: they share helpers with the tests (tests/conftest.py,
plugin_helpers, users_jobs, ...), and a helper moved without them breaks a benchmark that no test
runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

#: One interpreter imports them all, as ``python benchmarks/bench_x.py`` would (its folder first
#: on the path), without running any: each runs only under ``__main__``.
_IMPORT_ALL = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
failed = []
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_benchmark_imports():
    """Each benchmarks/bench_*.py imports in a fresh interpreter, its helpers all found."""
    names = sorted(path.stem for path in BENCHMARKS.glob("bench_*.py"))
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, str(BENCHMARKS), *names],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", done.stdout
    assert len(names) >= 20

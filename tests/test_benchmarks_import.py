"""Every benchmark still imports: they share helpers with the tests (tests/conftest.py,
plugin_helpers, users_jobs, ...), and a helper moved without them breaks a benchmark that no test
runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

#: One interpreter imports them all (their folder first on the path, as ``python
#: benchmarks/bench_x.py`` puts it), without running any: each runs only under ``__main__``.
#: Each puts the tests' folders on the path itself; one that forgot would pass here only if an
#: earlier one had, so the path is put back after each and the repository's modules forgotten.
_IMPORT_ALL = """
import importlib, os, sys
benchmarks = sys.argv[1]
root = os.path.dirname(benchmarks)
sys.path.insert(0, benchmarks)
failed = []
path = list(sys.path)
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
    sys.path[:] = path
    for module in [m for m, v in sys.modules.items() if getattr(v, "__file__", None)]:
        where = sys.modules[module].__file__
        if where.startswith((benchmarks, os.path.join(root, "tests"))):
            del sys.modules[module]
print("\\n".join(failed))
"""


@pytest.mark.torch
def test_every_benchmark_imports():
    """Each benchmarks/bench_*.py imports, its helpers all found."""
    need("torch")  # some import it at once; tensorboard, tensorboardX and numpy are core
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

"""The notebooks in notebooks/ run top to bottom on the project's own Python (cells tagged
``skip-execution``, such as ``%tensorboard``, are skipped)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import need

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: A kernel name no user kernelspec is likely to shadow.
KERNEL = "tb-monitor-test-venv"


@pytest.fixture
def kernel(tmp_path, monkeypatch) -> str:
    """A kernelspec running this interpreter (the venv's), found first on JUPYTER_PATH."""
    need("ipykernel")
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tb-monitor tests",
        "language": "python",
        "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"},  # figures inline
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL


def _execute(name: str, kernel: str, cwd: Path, timeout: int) -> object:
    nbformat = need("nbformat")
    nbclient = need("nbclient")
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        book,
        kernel_name=kernel,
        timeout=timeout,
        resources={"metadata": {"path": str(cwd)}},
        skip_cells_with_tag="skip-execution",
    )
    client.execute()
    return book


def _outputs(book, kind: str) -> list:
    return [
        out
        for cell in book.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == kind or kind in out.get("data", {})
    ]


def test_the_tensorboard_cells_are_tagged_to_be_skipped():
    """Every cell using %tensorboard carries the skip-execution tag."""
    nbformat = need("nbformat")
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        book = nbformat.read(path, as_version=4)
        magic = [c for c in book.cells if c.cell_type == "code" and "%tensorboard" in c.source]
        assert magic, f"{path.name} has no %tensorboard cell"
        assert all("skip-execution" in c.metadata.get("tags", []) for c in magic), path.name


@pytest.mark.slow  # a Jupyter kernel runs the notebook: out of the fast lane
def test_quickstart_notebook_runs_and_plots(kernel, tmp_path):
    """01_quickstart writes a logdir, reads its scalars and draws the windows."""
    need("pandas")
    need("matplotlib")
    book = _execute("01_quickstart.ipynb", kernel, tmp_path, timeout=120)
    assert (tmp_path / "runs" / "quickstart").is_dir()
    assert _outputs(book, "image/png"), "no figure was drawn"
    tags = next(out["text"] for out in _outputs(book, "stream") if "loss.mean" in out["text"])
    assert "data/samples" in tags


@pytest.mark.slow
@pytest.mark.torch
def test_elastic_timeline_notebook_runs_the_job_and_draws_it(kernel, tmp_path):
    """02_elastic_timeline runs the demo job, shows its events, timeline, restart summary and
    why it restarted (the root cause and the ranks that went down with it)."""
    need("torch")
    need("pandas")
    need("matplotlib")
    book = _execute("02_elastic_timeline.ipynb", kernel, tmp_path, timeout=300)
    assert (tmp_path / "runs" / "elastic.trace.json").is_file()
    assert _outputs(book, "image/png"), "no timeline figure was drawn"
    tables = [out["data"]["text/html"] for out in _outputs(book, "text/html")]
    assert any("rendezvous_s" in table and "failed_ranks" in table for table in tables)
    assert any("root_cause_rank" in table and "collateral_ranks" in table for table in tables)
    printed = "".join(out["text"] for out in _outputs(book, "stream"))
    assert "attempt 0 failed because rank" in printed and "InjectedFailure" in printed

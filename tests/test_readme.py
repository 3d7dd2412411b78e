"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tb_monitor.logdir import readers

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_write_the_scalars_they_promise(tmp_path):
    """The README's examples, run in order in a fresh process, write the tags their comments name."""
    script = "import tb_monitor\n" + "\n".join(python_blocks())
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    tags = {point.tag for point in readers.iter_scalars(tmp_path / "runs" / "exp1")}
    assert {"loss.mean", "loss.max", "data/samples"} <= tags
    assert any(tag.startswith("train/") and tag.endswith(".step.success") for tag in tags)

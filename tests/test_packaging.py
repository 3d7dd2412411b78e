"""The Python versions the package claims are those .ci/wheels builds and tests a wheel on."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import need

ROOT = Path(__file__).resolve().parent.parent


def _wheels_script_versions() -> list[str]:
    match = re.search(r"^versions=\(([^)]*)\)$", (ROOT / ".ci" / "wheels").read_text(), re.M)
    assert match, ".ci/wheels has no versions=(...) line"
    return match.group(1).split()


def test_classifiers_name_the_versions_the_wheels_script_proves():
    """pyproject's Python 3.x classifiers are exactly the versions .ci/wheels tests."""
    tomllib = need("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    claimed = [
        classifier.rsplit(" :: ", 1)[1]
        for classifier in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", classifier)
    ]
    assert claimed == _wheels_script_versions()
    assert project["requires-python"] == f">={claimed[0]}"

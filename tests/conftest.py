"""Shared fixtures: real logdirs in tmp_path, and dependency gates that fail in CI."""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = os.environ.get("TB_MONITOR_CHROMIUM", "/usr/bin/chromium")

#: Real S3 and GCS servers on 127.0.0.1 (fixtures s3_server, s3_bucket, gcs_server, gcs_bucket),
#: and real torchrun jobs, one per scenario for the session (restarted, always_failing, ...).
pytest_plugins = ["object_store", "torchrun_jobs"]


def need(module: str) -> ModuleType:
    """Import an optional dependency; skip without it, but fail in CI where it must be present."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"{module} is required when CI=true but cannot be imported: {exc}")
        pytest.skip(f"{module} is not installed")


def need_chromium() -> str:
    """Path of the Debian chromium binary; skip without it, fail in CI."""
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path is None:
        if IN_CI:
            pytest.fail(f"chromium is required when CI=true but {CHROMIUM} does not exist")
        pytest.skip("chromium is not installed")
    return path


@pytest.fixture
def torch() -> ModuleType:
    """The real torch, needed by tests that compare with or drive PyTorch."""
    return need("torch")


@pytest.fixture
def logdir(tmp_path):
    """An empty logdir for one test."""
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def _fresh_metrics_routes(monkeypatch):
    """Each test starts with torchelastic metric groups routed as in a fresh process."""
    from tb_monitor.elastic.metrics import api

    monkeypatch.setattr(api, "_metrics_map", {})
    monkeypatch.setattr(api, "_streams", {})

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
#: real torchrun jobs, one per scenario for the session (restarted, always_failing, ...), and
#: every test's duration written to .pytest-durations.json.
pytest_plugins = ["object_store", "torchrun_jobs", "durations"]

try:  # hypothesis's per-example deadline is a timing test: this 2-core machine is noisy, and
    # the unit tests run beside real jobs (``-n 2``); a slow example is no failure here.
    from hypothesis import HealthCheck, settings
except ImportError:  # a test that needs it says so
    pass
else:
    settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("suite")


def need(module: str) -> ModuleType:
    """Import an optional dependency; skip without it, but fail in CI where it must be present."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"{module} is required when CI=true but cannot be imported: {exc}")
        # Called at a module's top too (``torch = need("torch")``): the whole module skips.
        pytest.skip(f"{module} is not installed", allow_module_level=True)


def need_chromium() -> str:
    """Path of the Debian chromium binary; skip without it, fail in CI."""
    path = shutil.which(CHROMIUM) or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path is None:
        if IN_CI:
            pytest.fail(f"chromium is required when CI=true but {CHROMIUM} does not exist")
        pytest.skip("chromium is not installed")
    return path


#: Flags for Debian's chromium in CI: headless, no sandbox, no network of its own.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium driven by Playwright (never a downloaded browser), one for the
    session (each xdist worker's; the browser tests share one group): launching it is the
    slowest part of a browser test. Skips without it, fails in CI."""
    sync_api = need("playwright.sync_api")
    executable = need_chromium()
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def need_netns() -> None:
    """Skip where two hosts cannot be made of network namespaces (``netns.py``: root, ``ip``,
    ``tc``); fail in CI."""
    from netns import netns_usable

    why = netns_usable()
    if why is not None:
        if IN_CI:
            pytest.fail(f"network namespaces are required when CI=true: {why}")
        pytest.skip(why)


def need_program(program: str, package: str) -> str:
    """Path of a program a Debian ``package`` installs (.ci/setup); skip without it, fail in CI."""
    path = shutil.which(program)
    if path is None:
        if IN_CI:
            pytest.fail(f"{program} ({package}) is required when CI=true but is not on PATH")
        pytest.skip(f"{program} is not installed (apt-get install {package})")
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


#: The two xdist groups whose tests run one after another, each on one worker, side by side:
#: the tests held to wall-clock bounds (``timed``), and the other tests that run a real job, a
#: server or a browser, or share a session-scoped fixture.
TIMED, SERIAL = "timed", "serial"


def pytest_itemcollected(item: pytest.Item) -> None:
    """Group the tests for ``-n 2 --dist loadgroup`` (pyproject's addopts). Those held to
    wall-clock bounds (``timed``: a job's shutdown against plain torchrun's, a stall named
    within 30 s, a straggler among ranks alike, a writer that never waits) run one after
    another, never beside each other; so do those that run a real job, a server or a browser,
    or share a session-scoped fixture (a torchrun job, an object store: made once per worker),
    in a second group beside them (the shutdown comparisons are side by side under one load,
    and every bound has the margin of a machine that also runs one job more). Every other
    module's tests run together (its module fixtures made once), wherever a worker is free.
    A long test held to no bound and sharing no fixture may run in the timed group
    (``beside_timed``): the two groups then take about as long, and the suite as long as the
    longer one."""
    if item.get_closest_marker("timed") or item.get_closest_marker("beside_timed"):
        group = TIMED
    else:
        group = SERIAL if _serial(item) else item.path.stem
    item.add_marker(pytest.mark.xdist_group(group))


def _serial(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in ("slow", "browser", "timed")):
        return True
    if "integration" in item.path.parts:
        return True
    definitions = getattr(item, "_fixtureinfo", None)
    return definitions is not None and any(
        fixture.scope == "session"
        for fixtures in definitions.name2fixturedefs.values()
        for fixture in fixtures
        if not fixture.func.__module__.startswith("_pytest")  # not tmp_path_factory and such
    )

"""The Timeline plugin: TensorBoard routes over the timeline records, and its loader.

Routes (under ``data/plugin/tb_monitor_timeline/``):

- ``static/<path>``: the ES-module frontend and its stylesheet, from a fixed list of files.
- ``timeline``: one window of the timeline, filtered (see :class:`tb_plugin.query.Query`).
- ``event?id=<n>``: every field of one event, for the details panel.
- ``ranks``: the Ranks view's heatmap, stragglers and stalls (see :mod:`tb_plugin.ranks`).
- ``status``: the data generation, so the frontend polls cheaply for new events, and how many
  undecodable records were skipped (``skipped``).

Records are decoded off the request threads (:mod:`tb_plugin.refresher`): the default experiment
starts warming up as soon as TensorBoard loads the plugin, and a request never waits more than a
second for a refresh; during a long first decode it gets what is decoded so far and ``loading``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any

from tensorboard import context as tb_context
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_plugin import metadata
from tb_plugin.query import Query, QueryError, UnknownRunError, timeline_payload
from tb_plugin.ranks import RanksApp
from tb_plugin.refresher import Refresher
from tb_plugin.store import Snapshot, TimelineStore, UnknownEventError

__all__ = ["TimelineLoader", "TimelinePlugin"]

_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}
_STATIC_PREFIX = "/static/"
#: Experiments whose decoded timelines are kept (one background thread each).
_MAX_EXPERIMENTS = 8
#: Timeline payloads kept for the columns they were computed from.
_MAX_PAYLOADS = 8


def _json(request: wrappers.Request, body: Any, code: int = 200) -> wrappers.Response:
    # Serialized here so TensorBoard's Cleanse pass does not walk large payloads.
    return http_util.Respond(request, json.dumps(body), "application/json", code=code)


def _error(request: wrappers.Request, message: str, code: int) -> wrappers.Response:
    return _json(request, {"error": message}, code=code)


def _static_files(root: str) -> dict[str, str]:
    """The frontend's files, by their URL path below ``static/`` (``panels/legend.js``)."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if os.path.splitext(name)[1] in _STATIC_TYPES:
                path = os.path.join(folder, name)
                found[os.path.relpath(path, root).replace(os.sep, "/")] = path
    return found


class TimelinePlugin(base_plugin.TBPlugin):
    """Serves the Timeline dashboard from the data provider's timeline records."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        self._provider = context.data_provider
        self._refreshers: dict[str, Refresher] = {}
        self._refreshers_lock = threading.Lock()
        # Only these files are ever served: a request names one of them or gets a 404.
        self._static = _static_files(_STATIC_DIR)
        self._payloads = _Payloads()
        self._ranks = RanksApp(self._provider, self._attempts_so_far)
        if self._provider is not None:
            self._refresher("")  # a local TensorBoard's one experiment: warm it up now

    def get_plugin_apps(self) -> dict[str, Any]:
        return {
            _STATIC_PREFIX + "*": self._serve_static,
            "/timeline": self._serve_timeline,
            "/event": self._serve_event,
            "/status": self._serve_status,
            "/ranks": self._ranks.serve,
        }

    def is_active(self) -> bool:
        """Active when any run holds timeline records or rank-health windows (for the Ranks
        view); TensorBoard asks only when unsure."""
        if self._provider is None:
            return False
        context = tb_context.RequestContext()
        listing = self._provider.list_tensors(
            context, experiment_id="", plugin_name=self.plugin_name
        )
        if any(listing.values()):
            return True
        scalars = self._provider.list_scalars(context, experiment_id="", plugin_name="scalars")
        return any(tag.startswith("rank/") for tags in scalars.values() for tag in tags)

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(
            es_module_path=_STATIC_PREFIX + "index.js", tab_name=metadata.TAB_NAME
        )

    def _refresher(self, eid: str) -> Refresher:
        with self._refreshers_lock:
            refresher = self._refreshers.get(eid)
            if refresher is None:
                # Any experiment id in a URL reaches here (the local provider ignores it): keep
                # a few, so stray ids cannot pile up threads and copies of the data.
                if len(self._refreshers) >= _MAX_EXPERIMENTS:
                    oldest = next(iter(self._refreshers))
                    self._refreshers.pop(oldest).stop(timeout=0)
                store = TimelineStore(self._provider, eid)
                refresher = self._refreshers[eid] = Refresher(store).start()
            return refresher

    def _fresh_store(self, request: wrappers.Request) -> TimelineStore:
        """The request's store, refreshed, or still loading after a short wait."""
        refresher = self._refresher(plugin_util.experiment_id(request.environ))
        refresher.request(plugin_util.context(request.environ))
        return refresher.store

    def _attempts_so_far(self, request: wrappers.Request) -> list[dict[str, Any]]:
        """The attempts for the Ranks view's markers. Once the store has read everything, as
        it holds them now (a refresh runs behind): a ranks request waiting for the timeline's
        refresh round too would take twice as long. Before, after a short wait like any."""
        refresher = self._refresher(plugin_util.experiment_id(request.environ))
        refresher.request_behind_once_read(plugin_util.context(request.environ))
        return refresher.store.snapshot().attempts

    @wrappers.Request.application
    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        name = request.path.rsplit(_STATIC_PREFIX, 1)[-1]
        path = self._static.get(name)
        if path is None:
            return _error(request, f"no static file {name!r:.200}", 404)
        with open(path, "rb") as f:
            content = f.read()
        return http_util.Respond(request, content, _STATIC_TYPES[os.path.splitext(name)[1]])

    @wrappers.Request.application
    def _serve_timeline(self, request: wrappers.Request) -> wrappers.Response:
        try:
            query = Query.from_args(request.args)
            return _json(request, self._payloads.get(self._fresh_store(request).snapshot(), query))
        except UnknownRunError as exc:
            return _error(request, str(exc), 404)
        except QueryError as exc:
            return _error(request, str(exc), 400)

    @wrappers.Request.application
    def _serve_event(self, request: wrappers.Request) -> wrappers.Response:
        raw = request.args.get("id", "")
        # ASCII digits, bounded before int(): a 5000-digit numeral would raise in int() itself.
        if not re.fullmatch(r"[0-9]{1,18}", raw):
            return _error(request, f"id must be a non-negative integer, got {raw!r:.80}", 400)
        store = self._fresh_store(request)
        try:
            return _json(request, store.event(plugin_util.context(request.environ), int(raw)))
        except UnknownEventError as exc:
            return _error(request, str(exc), 404)

    @wrappers.Request.application
    def _serve_status(self, request: wrappers.Request) -> wrappers.Response:
        store = self._fresh_store(request)
        skipped = store.skipped()["count"]
        body = {"generation": store.generation, "loading": store.loading(), "skipped": skipped}
        return _json(request, body)


class _Payloads:
    """The timeline payloads served from the columns shown now, by query.

    The frontend asks for the same window every few seconds; while a long first read goes on,
    and whenever nothing new came, the columns it would be computed from are the same, so the
    answer is too (but for how far loading is). Only the newest columns' payloads are kept:
    older columns would otherwise stay in memory with them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._columns: object = None
        self._generation = -1  # the columns': a slow request for older ones keeps nothing
        self._kept: dict[tuple[bool, Query], dict[str, Any]] = {}

    def get(self, snap: Snapshot, query: Query) -> dict[str, Any]:
        # Whether loading is done is part of the key: an unknown run is an error only then.
        key = (snap.loading is None, query)
        with self._lock:
            payload = self._kept.get(key) if snap.columns is self._columns else None
        if payload is None:
            payload = timeline_payload(snap, query)
            with self._lock:
                if snap.columns is not self._columns and snap.generation >= self._generation:
                    self._columns, self._generation, self._kept = snap.columns, snap.generation, {}
                if snap.columns is self._columns:
                    if len(self._kept) >= _MAX_PAYLOADS:
                        self._kept.pop(next(iter(self._kept)))
                    self._kept[key] = payload
        return {**payload, "loading": snap.loading}


def _lift_sampling(samples_per_plugin: Any) -> dict[str, int]:
    if isinstance(samples_per_plugin, str):  # set programmatically, not parsed by argparse
        pairs = (item.split("=", 1) for item in samples_per_plugin.split(",") if item.strip())
        samples_per_plugin = {k.strip(): int(v) for k, v in pairs}
    samples = dict(samples_per_plugin or {})
    samples.setdefault(metadata.PLUGIN_NAME, 0)
    return samples


class TimelineLoader(base_plugin.TBLoader):
    """Loads the Timeline plugin and keeps every one of its records (no sampling)."""

    def fix_flags(self, flags: Any) -> None:
        """Keep all timeline records (``samples_per_plugin`` 0) unless the user chose a number.

        TensorBoard keeps 10 tensor summaries per tag by default (100 with ``--load_fast``); a
        timeline with holes would mislead, so the plugin lifts the limit for its own tag only.
        Both loaders honour ``samples_per_plugin``: the Python one as its tensor size guidance,
        the Rust one as ``--samples-per-plugin``.
        """
        if hasattr(flags, "samples_per_plugin"):
            flags.samples_per_plugin = _lift_sampling(flags.samples_per_plugin)

    def load(self, context: base_plugin.TBContext) -> TimelinePlugin | None:
        if context.data_provider is None:
            return None
        return TimelinePlugin(context)

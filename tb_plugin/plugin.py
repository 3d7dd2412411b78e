"""The Timeline plugin: its one app, the table of its routes, and its loader.

Routes (under ``data/plugin/tb_monitor_timeline/``, the table :attr:`TimelinePlugin.routes`):

- ``static/<path>``: the ES-module frontend and its stylesheet, from a fixed list of files.
- ``timeline``: one window of the timeline, filtered (see :class:`tb_plugin.requests.Query`).
- ``event?id=<n>``: every field of one event, for the details panel.
- ``ranks``: the Ranks view's heatmap, stragglers and stalls (see :mod:`tb_plugin.ranks`;
  :class:`tb_plugin.requests.RankQuery`).
- ``capture?path=<run id>/captures/<id>/rank-<N>/<file>``: one file of a capture (``tb-monitor
  capture``: a profile, chrome-trace JSON Perfetto loads; stacks; Flight Recorder; wait
  counters), read from the logdir; no other path is served.
- ``status``: the data generation, so the frontend polls cheaply for new events, and how many
  undecodable records were skipped (``skipped``).

Every route parses its query string with :mod:`tb_plugin.requests` and answers through one
error path: a bad parameter is a 400, an unknown run, event or file a 404, each a JSON
``{"error"}`` naming the value. An event the store may not have read yet (its first read, or
any read, is still going on) is a 503 with ``Retry-After`` (:class:`NotReadYetError`):
"loading", not "not found"; the frontend asks again then (``static/api.js``). Both views'
stores (the timeline's, the Ranks view's) are made and refreshed the same way (:class:`tb_plugin.refresher.Refreshers`), off the request threads:
the default experiment starts warming up as soon as TensorBoard loads the plugin, and a request
never waits more than a second for a refresh; during a long first read it gets what is read so
far and ``loading``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from typing import Any

from tensorboard import context as tb_context
from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_monitor import contract
from tb_monitor.logdir import fs
from tb_plugin import metadata
from tb_plugin.columns import Snapshot
from tb_plugin.event_files import EventFiles, sampling
from tb_plugin.query import UnknownRunError, frame_payload, shown_of, window_payload
from tb_plugin.rank_payload import captures_payload
from tb_plugin.ranks import RankStore, ranks_payload
from tb_plugin.read_workers import ReadWorkers
from tb_plugin.refresher import Refreshers
from tb_plugin.requests import Query, RankQuery, RequestError, event_id
from tb_plugin.store import TimelineStore, UnknownEventError

__all__ = ["NotReadYetError", "TimelineLoader", "TimelinePlugin", "UnknownFileError"]

_STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
_STATIC_TYPES = {".js": "text/javascript", ".css": "text/css"}
_STATIC_PREFIX = "/static/"
#: The only paths ``capture`` serves, below the logdir: a capture's files (``launcher.capture``).
_CAPTURE_PATH = re.compile(
    r"^[^/.][^/]*/captures/[^/.][^/]*/rank-\d+/"
    r"(profile\.json|stacks\.txt|flight_recorder\.json|wait_counters\.json)$"
)
_CAPTURE_TYPES = {".json": "application/json", ".txt": "text/plain; charset=utf-8"}
#: Timeline payloads kept for the columns they were computed from.
_MAX_PAYLOADS = 8
#: Seconds a client waits before asking again for what the store is still reading (503).
RETRY_AFTER_S = 1

#: A handler takes the request and answers with a JSON-ready body or a whole response.
Handler = Callable[[wrappers.Request], Any]


class UnknownFileError(LookupError):
    """A path below ``static/`` that is not one of the frontend's files."""


class NotReadYetError(LookupError):
    """What a request names is not in the store, which is still reading: ask again soon."""


#: What a request may name that does not exist: a 404 with the message, on every route.
_NOT_FOUND = (UnknownRunError, UnknownEventError, UnknownFileError)


def _json(
    request: wrappers.Request, body: Any, code: int = 200, headers: list | None = None
) -> wrappers.Response:
    # Serialized here so TensorBoard's Cleanse pass does not walk large payloads.
    return http_util.Respond(
        request, json.dumps(body), "application/json", code=code, headers=headers
    )


def _app(handler: Handler) -> Callable[..., Any]:
    """The WSGI app of one route: the one error path every route shares. A bad parameter
    (:class:`~tb_plugin.requests.RequestError`) is a 400, an unknown name a 404 and one not read
    yet a 503 with ``Retry-After``, each a JSON ``{"error"}`` naming the value; never a
    traceback."""

    @wrappers.Request.application
    def app(request: wrappers.Request) -> wrappers.Response:
        try:
            body = handler(request)
        except RequestError as exc:
            return _json(request, {"error": str(exc)}, code=400)
        except NotReadYetError as exc:
            retry = [("Retry-After", str(RETRY_AFTER_S))]
            return _json(request, {"error": str(exc), "loading": True}, 503, retry)
        except _NOT_FOUND as exc:
            return _json(request, {"error": str(exc)}, code=404)
        return body if isinstance(body, wrappers.Response) else _json(request, body)

    return app


def _static_files(root: str) -> dict[str, str]:
    """The frontend's files, by their URL path below ``static/`` (``panels/legend.js``)."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if os.path.splitext(name)[1] in _STATIC_TYPES:
                path = os.path.join(folder, name)
                found[os.path.relpath(path, root).replace(os.sep, "/")] = path
    return found


def _experiment(request: wrappers.Request) -> tuple[str, Any]:
    """The request's experiment id and its TensorBoard request context."""
    return plugin_util.experiment_id(request.environ), plugin_util.context(request.environ)


class TimelinePlugin(base_plugin.TBPlugin):
    """Serves the Timeline dashboard and its Ranks view from the data provider's records."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        provider = self._provider = context.data_provider
        # Only these files are ever served: a request names one of them or gets a 404.
        self._static = _static_files(_STATIC_DIR)
        self._payloads = _Payloads()
        # Each view's stores, one per experiment, each kept fresh by its own refresher.
        flags = context.flags
        reads_files = EventFiles.of_flags(flags) is not None  # else through the provider
        creds = getattr(flags, "grpc_creds_type", None)
        helpers = ReadWorkers.of(provider, creds, files=reads_files)
        self._timelines = Refreshers(
            lambda eid: TimelineStore(
                provider, eid, helpers=helpers, files=EventFiles.of_flags(flags)
            )
        )
        self._ranks = Refreshers(lambda eid: RankStore(provider, eid))
        self._logdir = getattr(flags, "logdir", None) or None  # where captures are read
        if provider is not None:  # a local TensorBoard's one experiment: warm it up now
            self._timelines.get("")
            self._ranks.get("")
        #: Every route of the plugin, below ``data/plugin/<name>``, and its handler.
        self.routes: dict[str, Handler] = {
            _STATIC_PREFIX + "*": self._serve_static,
            "/timeline": self._serve_timeline,
            "/event": self._serve_event,
            "/status": self._serve_status,
            "/ranks": self._serve_ranks,
            "/capture": self._serve_capture,
        }

    def get_plugin_apps(self) -> dict[str, Any]:
        return {route: _app(handler) for route, handler in self.routes.items()}

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
        return any(
            tag.startswith(contract.RANK_PREFIX) for tags in scalars.values() for tag in tags
        )

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(
            es_module_path=_STATIC_PREFIX + "index.js", tab_name=metadata.TAB_NAME
        )

    def _serve_static(self, request: wrappers.Request) -> wrappers.Response:
        name = request.path.rsplit(_STATIC_PREFIX, 1)[-1]
        path = self._static.get(name)
        if path is None:
            raise UnknownFileError(f"no static file {name!r:.200}")
        with open(path, "rb") as f:
            content = f.read()
        return http_util.Respond(request, content, _STATIC_TYPES[os.path.splitext(name)[1]])

    def _serve_timeline(self, request: wrappers.Request) -> wrappers.Response:
        query = Query.from_args(request.args)
        snap = self._timelines.store(*_experiment(request)).snapshot()
        return http_util.Respond(request, self._payloads.get(snap, query), "application/json")

    def _serve_event(self, request: wrappers.Request) -> dict[str, Any]:
        wanted = event_id(request.args)
        eid, ctx = _experiment(request)
        store = self._timelines.store(eid, ctx)
        # Ids are positions in what is read: one past them may be in what is still being read.
        # Asked before the lookup, so a read ending in between cannot turn "loading" into a 404.
        settled = store.has_read_all() and store.loading() is None
        try:
            return store.event(ctx, wanted)
        except UnknownEventError:
            if settled:
                raise
            raise NotReadYetError(
                f"event id {wanted!r} is not read yet: the store is still loading"
            ) from None

    def _serve_status(self, request: wrappers.Request) -> dict[str, Any]:
        store = self._timelines.store(*_experiment(request))
        skipped = store.skipped()["count"]
        return {"generation": store.generation, "loading": store.loading(), "skipped": skipped}

    def _serve_ranks(self, request: wrappers.Request) -> dict[str, Any]:
        query = RankQuery.from_args(request.args)
        eid, ctx = _experiment(request)
        ranks = self._ranks.store(eid, ctx, behind=True)
        # The attempts for the markers, as the timeline's store holds them now: a ranks request
        # waiting for the timeline's refresh round too would take twice as long.
        timelines = self._timelines.store(eid, ctx, behind=True)
        attempts = timelines.snapshot().attempts
        found, jobs = timelines.analysis(), timelines.job_spans()
        payload = ranks_payload(
            ranks.snapshot(),
            query,
            attempts,
            found.views,
            jobs,
            found.calls,
            found.cut_off,
        )
        if not payload.get("unchanged"):
            payload["captures"] = captures_payload(payload.get("runs") or [], found.captures)
        return payload

    def _serve_capture(self, request: wrappers.Request) -> wrappers.Response:
        """One file of a capture, from the logdir: a path of no other shape is a 404."""
        path = request.args.get("path", "")
        if self._logdir is None or not _CAPTURE_PATH.match(path):
            raise UnknownFileError(f"no capture file {path!r:.200}")
        try:
            content = fs.read_bytes(fs.join(self._logdir, path))
        except (OSError, ValueError):
            raise UnknownFileError(f"no capture file {path!r:.200}") from None
        kind = _CAPTURE_TYPES[os.path.splitext(path)[1]]
        return http_util.Respond(request, content, kind)


class _Payloads:
    """The timeline payloads served from the columns shown now, by query, as JSON text.

    The frontend asks for the same window every few seconds; while a long first read goes on,
    and whenever nothing new came, the columns it would be computed from are the same, so the
    answer is too (but for how far loading is). And every window of the same filters says the
    same of its lanes, facets and attempts (on a big job most of a zoomed window's payload,
    and its JSON encoding each time): that frame is encoded once per columns and filters. Only the newest
    columns' payloads are kept: older columns would otherwise stay in memory with them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._columns: object = None
        self._generation = -1  # the columns': a slow request for older ones keeps nothing
        self._kept: dict[tuple[bool, Query], str] = {}  # a window's JSON, but its "loading"
        self._frames: dict[tuple[Any, ...], str] = {}  # by filters: the frame's JSON

    def get(self, snap: Snapshot, query: Query) -> str:
        """The payload of ``query`` over ``snap`` as JSON text (an object)."""
        # Whether loading is done is part of the key: an unknown run is an error only then.
        key = (snap.loading is None, query)
        with self._lock:
            text = self._kept.get(key) if snap.columns is self._columns else None
        if text is None:
            text = self._encode(snap, query)
            with self._lock:
                if snap.columns is self._columns:
                    if len(self._kept) >= _MAX_PAYLOADS:
                        self._kept.pop(next(iter(self._kept)))
                    self._kept[key] = text
        return f'{text[:-1]}, "loading": {json.dumps(snap.loading)}}}'

    def _encode(self, snap: Snapshot, query: Query) -> str:
        """The payload's JSON but its "loading": its window's, then its frame's kept or made."""
        shown = shown_of(snap, query)
        window = window_payload(snap, query, shown)
        del window["loading"]
        filters = (query.run, query.run_id, query.kind, query.state, query.text)
        with self._lock:
            if snap.columns is not self._columns and snap.generation >= self._generation:
                self._columns, self._generation = snap.columns, snap.generation
                self._kept, self._frames = {}, {}
            frame = self._frames.get(filters) if snap.columns is self._columns else None
        if frame is None:
            frame = json.dumps(frame_payload(snap, query, shown))
            with self._lock:
                if snap.columns is self._columns:
                    if len(self._frames) >= _MAX_PAYLOADS:  # a search typed: one a keystroke
                        self._frames.pop(next(iter(self._frames)))
                    self._frames[filters] = frame
        return f"{json.dumps(window)[:-1]}, {frame[1:]}"


def _lift_sampling(samples_per_plugin: Any, keep: int) -> dict[str, int]:
    if isinstance(samples_per_plugin, str):  # set programmatically, not parsed by argparse
        pairs = (item.split("=", 1) for item in samples_per_plugin.split(",") if item.strip())
        samples_per_plugin = {k.strip(): int(v) for k, v in pairs}
    samples = dict(samples_per_plugin or {})
    samples.setdefault(metadata.PLUGIN_NAME, keep)
    return samples


class TimelineLoader(base_plugin.TBLoader):
    """Loads the Timeline plugin and sets how many of its records TensorBoard keeps."""

    def fix_flags(self, flags: Any) -> None:
        """TensorBoard keeps what the plugin needs of its records unless the user chose a number.

        TensorBoard keeps 10 tensor summaries per tag by default (100 with ``--load_fast``).
        Reading a local logdir's event files itself (:mod:`tb_plugin.event_files`), the plugin
        needs none of them (``samples_per_plugin`` 1: each series' newest, for its listing);
        otherwise it reads every record through the data provider, and a timeline with holes
        would mislead, so it lifts the limit for its own tag only (0). Both loaders honour
        ``samples_per_plugin``: the Python one as its tensor size guidance, the Rust one as
        ``--samples-per-plugin``. An ``s3://`` logdir gives TensorBoard's boto3 reader the
        deadline of tb-monitor's own remote reads (``TB_MONITOR_REMOTE_TIMEOUT_S``).
        """
        if hasattr(flags, "samples_per_plugin"):
            flags.samples_per_plugin = _lift_sampling(flags.samples_per_plugin, sampling(flags))
        logdirs = f"{getattr(flags, 'logdir', '') or ''} {getattr(flags, 'logdir_spec', '') or ''}"
        if "s3://" in logdirs:  # TensorBoard's own S3 reader: the deadline of our reads
            fs.bound_boto3_requests()

    def load(self, context: base_plugin.TBContext) -> TimelinePlugin | None:
        if context.data_provider is None:
            return None
        return TimelinePlugin(context)

"""Keeps a store (:class:`~tb_plugin.provider_store.ProviderStore`) fresh on a background thread.

Decoding a big job the first time takes seconds (TensorBoard converts every record to numpy), so
it must never happen on a request thread that the browser waits on. A :class:`Refresher` starts
warming the store as soon as the plugin is loaded, polling cheaply (the data provider's listing,
or a walk of the event files), so
a user who opens the tab after TensorBoard has loaded the logdir gets the warm path. A request
asks for a refresh and waits for it only a short while; past that it answers with what is decoded
so far, and the store's :meth:`~tb_plugin.provider_store.ProviderStore.loading` says how far it
is. The Timeline's and the Ranks view's stores are refreshed by the same class.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tensorboard import context as tb_context

from tb_plugin.provider_store import REFRESH_INTERVAL_S, ProviderStore, release_freed_memory

__all__ = [
    "ANSWER_WAIT_S",
    "MAX_EXPERIMENTS",
    "MAX_STORE_BYTES",
    "POLL_S",
    "Refresher",
    "Refreshers",
]

#: A request waits at most this long (seconds) for the refresh it asked for.
ANSWER_WAIT_S = 1.0
#: The background thread lists the provider's series this often (seconds) while idle.
POLL_S = 2.0
#: Experiments whose stores are kept, per view (one background thread each).
MAX_EXPERIMENTS = 8
#: Bytes the stores of one view may hold together (``ProviderStore.nbytes``) before the least
#: recently used ones are dropped; the one in use is always kept, whatever its size.
MAX_STORE_BYTES = 512 * 2**20

_log = logging.getLogger(__name__)

StoreT = TypeVar("StoreT", bound=ProviderStore)


class Refresher(Generic[StoreT]):
    """One daemon thread that runs every refresh of one store: polled, or asked for by requests."""

    def __init__(
        self,
        store: StoreT,
        poll_s: float = POLL_S,
        context: Callable[[], Any] = tb_context.RequestContext,
    ) -> None:
        self.store = store
        self._poll_s = poll_s
        self._context = context
        self._cond = threading.Condition()
        self._wanted = 0  # refresh rounds asked for by requests
        self._done = 0  # refresh rounds finished
        self._busy = False
        self._asked_ctx: Any = None
        self._served = False  # a request came since the heap was last trimmed
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="tb-monitor-refresh", daemon=True)

    def start(self) -> Refresher[StoreT]:
        """Start the thread: the first poll (the warm-up) runs at once."""
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Ask the thread to finish after its current round and wait up to ``timeout``."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def is_running(self) -> bool:
        """Whether the thread still runs (a stopped one ends after its current round)."""
        return self._thread.is_alive()

    def request(self, ctx: Any, wait_s: float = ANSWER_WAIT_S) -> bool:
        """Have the store refreshed with a request's context; True when that happened in time.

        A store refreshed less than ``REFRESH_INTERVAL_S`` ago counts as fresh. Otherwise the
        round that answers starts after this call (a round already running may have listed the
        provider before the data this request expects), and the call waits at most ``wait_s``.
        """
        with self._cond:
            self._served = True
            if not self._busy and self.store.refreshed_within(REFRESH_INTERVAL_S):
                return True
            target = self._done + (2 if self._busy else 1)
            self._wanted = max(self._wanted, target)
            self._asked_ctx = ctx
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._done >= target, timeout=wait_s)

    def request_behind_once_read(self, ctx: Any) -> None:
        """Like ``request``, but once the store has read everything the request does not wait:
        it answers from what the store holds and the refresh runs behind it, for the next
        poll (listing a big job's series costs the data server noticeably every time, more than a
        walk of its files)."""
        self.request(ctx, wait_s=0.0 if self.store.has_read_all() else ANSWER_WAIT_S)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stopped or self._wanted > self._done,
                    timeout=self._poll_s if self._done else 0,
                )
                if self._stopped:
                    return
                asked = self._wanted > self._done
                ctx, self._asked_ctx = self._asked_ctx, None
                self._busy = True
            try:
                # Polls read only settled series; a request reads everything that is new.
                self.store.refresh(
                    ctx if asked and ctx is not None else self._context(),
                    force=True,
                    settled_only=not asked,
                )
            except Exception:  # a provider error must not end the thread; the next round retries
                # A poll may fail while TensorBoard's data server starts; a request's may not.
                _log.log(logging.ERROR if asked else logging.DEBUG, "refresh failed", exc_info=True)
            finally:
                with self._cond:
                    self._busy = False
                    self._done += 1
                    self._cond.notify_all()
            if not asked:
                self._trim_after_requests()

    def _trim_after_requests(self) -> None:
        """After a poll no request asked for (none came for ``poll_s``), give the C heap's free
        pages back if requests came since the last time. A big job's queries free blocks of
        a few MiB, which glibc keeps (a big job's TensorBoard would hold them at rest);
        trimming while requests come would only make the next one fault its pages in again."""
        with self._cond:
            served, self._served = self._served, False
        if served:
            release_freed_memory()


class Refreshers(Generic[StoreT]):
    """One store per experiment, each with its :class:`Refresher`, made the same way for every
    view: the Timeline's and the Ranks view's are two instances of this.

    Any experiment id in a URL reaches here (the local provider ignores it), so stores are kept
    least recently used first and dropped from there: past ``most`` of them (threads), and
    while they hold more than ``max_bytes`` together (a big job's store holds hundreds of MB;
    counting stores instead would let a few distinct ids keep several copies of it alive).
    """

    def __init__(
        self,
        make_store: Callable[[str], StoreT],
        most: int = MAX_EXPERIMENTS,
        max_bytes: int = MAX_STORE_BYTES,
    ):
        self._make_store = make_store
        self._most = most
        self._max_bytes = max_bytes
        self._refreshers: dict[str, Refresher[StoreT]] = {}  # least recently used first
        self._lock = threading.Lock()

    def get(self, eid: str) -> Refresher[StoreT]:
        """The experiment's refresher, started (its store warming up) on first use."""
        with self._lock:
            refresher = self._refreshers.pop(eid, None)
            if refresher is None:
                refresher = Refresher(self._make_store(eid)).start()
            self._refreshers[eid] = refresher  # now the most recently used
            self._drop_over_limits()
            return refresher

    def _drop_over_limits(self) -> None:
        """Stop and forget the least recently used stores while over either limit."""
        sizes = {eid: r.store.nbytes() for eid, r in self._refreshers.items()}
        total = sum(sizes.values())
        while len(self._refreshers) > 1 and (
            len(self._refreshers) > self._most or total > self._max_bytes
        ):
            eid = next(iter(self._refreshers))
            self._refreshers.pop(eid).stop(timeout=0)
            total -= sizes[eid]

    def store(self, eid: str, ctx: Any, *, behind: bool = False) -> StoreT:
        """The experiment's store, refreshed for a request with context ``ctx``: after a short
        wait (:meth:`Refresher.request`), or with ``behind`` at once once it has read
        everything (:meth:`Refresher.request_behind_once_read`)."""
        refresher = self.get(eid)
        if behind:
            refresher.request_behind_once_read(ctx)
        else:
            refresher.request(ctx)
        return refresher.store

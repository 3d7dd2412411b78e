"""A big read decoded in helper processes, on the cores TensorBoard's own process leaves idle.

A cold TensorBoard on a big job reads many timeline records, and decoding them is Python: one
core busy for seconds while the others wait. Decoding a chunk is pure
(:func:`tb_plugin.decoding.decode_chunk`), so a read of many chunks deals them out to helper
processes (``python -m tb_plugin.read_workers``): a helper reads its chunk, from the event files
(:mod:`tb_plugin.event_files`) or over its own channel to TensorBoard's data server, decodes it
and hands the decoded columns back pickled through a pipe, while the store keeps the chunk
before. Chunks are kept in their order, so the
store holds the same events, with the same ids, as a read in its own process (tested).

Helpers are used when the plugin reads the event files itself, or else with TensorBoard's
gRPC data provider (``--load_fast``), for a read of at
least :data:`MIN_CHUNKS` chunks (a helper's start is worth its cost then), and they exit when
the read is done. A helper that fails is a warning, not a failed read: its chunk, and once a
helper is gone every chunk after it, is decoded in TensorBoard's process instead.
``TB_MONITOR_READ_PROCESSES`` sets how many helpers a read starts (default: one per usable core,
at most 4; 0: none).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Generator, Mapping
from typing import IO, Any

from tb_plugin.decoding import DecodedChunk, decode_chunk, decode_files
from tb_plugin.metadata import PLUGIN_NAME
from tb_plugin.provider_store import ChunkRequest
from tb_plugin.records import grpc_attribute, read_grpc

__all__ = ["MIN_CHUNKS", "ReadWorkers"]

#: A read of fewer chunks is decoded in TensorBoard's process.
MIN_CHUNKS = 4
_MAX_PROCESSES = 4
_AHEAD = 2  # chunks asked of each helper before its first answer is kept
_MAX_REPLY = 256 << 20  # the data server's reply a helper takes: TensorBoard's own channel's
_ENV = "TB_MONITOR_READ_PROCESSES"
_COMMAND = [sys.executable, "-m", __name__]  # a helper, given what it reads
_FILES = "files"  # a helper's argument: it reads event files
#: A helper does no linear algebra: numpy's BLAS would start a thread per core as it is
#: imported, a share of each helper's start, taken from the read it starts for.
_ONE_THREAD = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
_log = logging.getLogger(__name__)


def _processes() -> int:
    """How many helpers a read starts: ``TB_MONITOR_READ_PROCESSES``, else one per usable core
    (TensorBoard's own process keeps the chunks meanwhile), at most 4."""
    raw = os.environ.get(_ENV, "").strip()
    if raw:
        try:
            count = int(raw)
        except ValueError:
            _log.warning("%s=%r is not a whole number: helpers left at the default", _ENV, raw)
        else:
            return max(0, count)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(_MAX_PROCESSES, cores)


class ReadWorkers:
    """Helper processes for the reads of one data server (``address``, over ``creds``:
    TensorBoard's ``--grpc_creds_type``), or of event files (``address`` None: each chunk
    names its files' ranges)."""

    def __init__(
        self, address: str | None, creds: str = "local", processes: int | None = None
    ) -> None:
        self.address = address
        self.creds = creds
        self.processes = _processes() if processes is None else processes

    @classmethod
    def of(cls, data_provider: Any, creds: Any = None, files: bool = False) -> ReadWorkers | None:
        """Helpers reading event files (``files``), else for ``data_provider`` when it is
        TensorBoard's gRPC provider, else None."""
        if files:
            return cls(None)
        address = grpc_attribute(data_provider, "_addr")
        return cls(str(address), str(creds or "local")) if address else None

    def map(
        self,
        experiment_id: str,
        chunks: list[ChunkRequest],
        last: Mapping[tuple[str, str], int],
        fetch: Callable[[ChunkRequest], DecodedChunk],
    ) -> Generator[DecodedChunk, None, None]:
        """Each chunk decoded (``last``: each series' step already read), in order: by the
        helpers when the read is big enough, else (and for what a helper fails) by ``fetch``."""
        if len(chunks) < MIN_CHUNKS or self.processes < 1:
            yield from map(fetch, chunks)
            return
        helpers = self._start(min(self.processes, len(chunks) // 2))
        sent = 0
        try:
            for at, chunk in enumerate(chunks):
                while helpers and sent < min(len(chunks), at + _AHEAD * len(helpers)):
                    wanted = chunks[sent]
                    runs = set(wanted.runs)
                    known = {key: step for key, step in last.items() if key[0] in runs}
                    helpers[sent % len(helpers)].ask((experiment_id, wanted, known))
                    sent += 1
                decoded = helpers[at % len(helpers)].answer() if helpers else None
                if decoded is None and helpers and not all(h.alive for h in helpers):
                    _log.warning("a read helper is gone: the rest of this read decodes here")
                    _stop(helpers)
                    helpers = []
                yield fetch(chunk) if decoded is None else decoded
        finally:
            _stop(helpers)

    def _start(self, count: int) -> list[_Helper]:
        """``count`` helpers, or as many as started (none: every chunk is decoded here)."""
        helpers = []
        for _ in range(count):
            try:
                helpers.append(_Helper(self.address, self.creds))
            except OSError as exc:
                _log.warning("no read helper (%s): this read decodes here", exc)
                break
        return helpers


def _stop(helpers: list[_Helper]) -> None:
    """Every helper told to go at once (each exits as its stdin ends), then reaped."""
    for helper in helpers:
        helper.hang_up()
    for helper in helpers:
        helper.close()


class _Helper:
    """One helper process: asked chunks through its stdin, answering each in turn on stdout."""

    def __init__(self, address: str | None, creds: str) -> None:
        path = os.pathsep.join(p for p in sys.path if p)  # the modules TensorBoard runs with
        self.process = subprocess.Popen(
            [*_COMMAND, *((_FILES,) if address is None else (address, creds))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path, **_ONE_THREAD},
        )
        self.alive = True

    def ask(self, request: tuple[str, ChunkRequest, dict[tuple[str, str], int]]) -> None:
        try:
            pickle.dump(request, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.process.stdin.flush()
        except OSError:  # it is gone: its answer says so
            self.alive = False

    def answer(self) -> DecodedChunk | None:
        """Its next chunk, or None when it failed that chunk (logged) or is gone."""
        try:
            status, found = pickle.load(self.process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError, TypeError):
            self.alive = False
            return None
        if status != "ok":
            _log.warning("a read helper failed a chunk, decoded here instead: %s", found)
            return None
        return found

    def hang_up(self) -> None:
        """Its stdin closed: it exits at once, whatever it was still asked (nothing more of it
        is read)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def close(self) -> None:
        """Hung up on, then reaped; killed if it does not exit."""
        self.hang_up()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


# -- the helper process ---------------------------------------------------------------------


Decode = Callable[[str, ChunkRequest, Mapping[tuple[str, str], int]], DecodedChunk]


def _grpc_decoder(address: str, creds: str) -> Decode:
    """A chunk read from the data server at ``address`` over its own channel, then decoded."""
    import grpc
    from tensorboard.data import grpc_provider
    from tensorboard.util import grpc_util

    credentials, channel_options = grpc_util.ChannelCredsType(creds).channel_config()
    channel_options.append(("grpc.max_receive_message_length", _MAX_REPLY))
    stub = grpc_provider.make_stub(grpc.secure_channel(address, credentials, channel_options))

    def decode(experiment_id: str, chunk: ChunkRequest, last: Any) -> DecodedChunk:
        data = read_grpc(stub, experiment_id, PLUGIN_NAME, chunk.runs, chunk.tags)
        return decode_chunk(data, chunk.runs, chunk.tags, last)

    return decode


def _serve(decode: Decode, requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer each chunk asked on ``requests`` with ``("ok", DecodedChunk)`` or ``("error",
    why)`` on ``answers``, until ``requests`` ends: then the process exits at once, as
    TensorBoard reads no more answers (it may be gone), whatever it was still asked or doing.
    Requests are taken off the pipe as they come (a thread), so TensorBoard never waits to ask
    while an answer is being written."""
    asked: queue.Queue[Any] = queue.Queue()

    def take() -> None:
        # A request cut short (TensorBoard killed while it asked) ends it as a hang-up does:
        # left waiting, the helper would outlive TensorBoard.
        with contextlib.suppress(Exception):
            while True:
                asked.put(pickle.load(requests))
        os._exit(0)  # hung up on: no answer is wanted any more

    threading.Thread(target=take, daemon=True).start()
    while True:
        experiment_id, chunk, last = asked.get()
        try:
            answer: tuple[str, Any] = ("ok", decode(experiment_id, chunk, last))
        except Exception:  # noqa: BLE001 - said to TensorBoard's process, which decodes it there
            answer = ("error", traceback.format_exc(limit=5))
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


def _files_decoder(_: str, chunk: ChunkRequest, last: Any) -> DecodedChunk:
    return decode_files(chunk, last)


def main(argv: list[str]) -> None:
    """``python -m tb_plugin.read_workers ADDRESS CREDS`` (a data server's reads) or ``...
    files`` (event files' reads): a helper on stdin and stdout."""
    gc.disable()  # a helper lives one read: what it drops in cycles goes with it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is TensorBoard's to act on; it exits
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print never garbles an answer
    with contextlib.suppress(BrokenPipeError):  # TensorBoard is gone: so is its helper
        decode = _grpc_decoder(*argv) if argv != [_FILES] else _files_decoder
        _serve(decode, sys.stdin.buffer, answers)


if __name__ == "__main__":
    main(sys.argv[1:])

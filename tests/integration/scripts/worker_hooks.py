"""A fake torchelastic worker exercising the worker hooks; events go to a JSON-lines file.

usage: worker_hooks.py OUT {exit,raise,record,sigterm,sigterm-blocked,sys-exit-3,sys-exit-0}
Each event is one line of its JSON; each flush is the line ``"flush"``.
"""

import ctypes
import json
import os
import signal
import sys
import threading
import time

from tb_monitor import _shutdown
from tb_monitor.rank.worker import install

out_path, mode = sys.argv[1], sys.argv[2]
out = open(out_path, "a")  # noqa: SIM115  # kept open until the process ends


def record(event):
    out.write(event.serialize() + "\n")


def flush():
    out.write(json.dumps("flush") + "\n")
    out.flush()


install(record, flush)
_shutdown.at_exit(out.flush, _shutdown.SINKS)  # as a writer does: flushed last, also on SIGTERM


def main():
    if mode in ("raise", "record"):
        raise RuntimeError("injected failure")
    if mode.startswith("sys-exit-"):
        sys.exit(int(mode.rsplit("-", 1)[1]))
    if mode == "sigterm":
        flush()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the signal ends the process before this does
    if mode == "sigterm-blocked":  # as in a DDP all_reduce waiting for a stopped peer
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        mutex, libc = ctypes.create_string_buffer(64), ctypes.CDLL(None)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # relocked: blocks forever in C, without the GIL


if mode == "record":
    from torch.distributed.elastic.multiprocessing.errors import record as torchelastic_record

    main = torchelastic_record(main)

main()
out.flush()

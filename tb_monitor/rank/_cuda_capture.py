"""Keeping our threads' CUDA calls out of the training thread's CUDA graph captures.

torch captures graphs in CUDA's global capture mode by default: while one thread captures, a
"potentially unsafe" CUDA call from any other thread in global mode (an event query among them)
invalidates the capture, and the training script fails. Our threads that query events (the
device-works poller, a stalled rank's Flight Recorder read) first switch themselves to
thread-local mode, as torch's NCCL watchdog does. torch has no Python binding for the switch;
libcudart, which torch loaded, has it.
"""

from __future__ import annotations

import ctypes
import threading

__all__ = ["thread_local_capture_mode"]

#: cudaStreamCaptureModeThreadLocal, from CUDA's driver_types.h.
_THREAD_LOCAL = 1
_switched = threading.local()


def thread_local_capture_mode() -> bool:
    """Put the calling thread in CUDA's thread-local capture mode (once per thread); False if it
    cannot be set, and then the thread must not query CUDA while a graph may be captured."""
    done = getattr(_switched, "ok", None)
    if done is None:
        done = _switched.ok = _switch()
    return done


def _switch() -> bool:
    try:
        import torch

        major = (torch.version.cuda or "").split(".")[0]
        cudart = ctypes.CDLL(f"libcudart.so.{major}")  # already loaded by torch: no search
        mode = ctypes.c_int(_THREAD_LOCAL)
        return cudart.cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
    except (OSError, AttributeError, ImportError):
        return False

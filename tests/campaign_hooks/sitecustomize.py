"""The fault campaign's hooks inside a job: a worker raises, or leaks memory, when told to from
outside.

On ``PYTHONPATH`` of the campaign's jobs only (``tests/fault_injection.py``), imported by every
Python process there, and active in torchrun's workers alone (they have ``RANK``): SIGUSR2 makes
the worker's main thread raise, as a bug in the user's code would, at its next Python line;
SIGRTMIN+5 starts a leak (8 MiB every 50 ms) that a memory limit then answers with the kernel's
OOM killer; with ``TB_MONITOR_CAMPAIGN_TERM_HANG_S`` set, a SIGTERM handler hangs that long, as
a handler stuck in a collective on its way out would; with ``TB_MONITOR_CAMPAIGN_SLOW_SAVE_S`` set,
rank 0's second ``torch.save`` (the first is the DDP script's epoch 0) writes that long, as on a
disk that slowed down: its writing is slowed, inside ``torch.save``, once torch is imported (every
rank's second save with ``TB_MONITOR_CAMPAIGN_SLOW_SAVE_RANKS=all``; a file
``campaign-saving-rank<R>`` in the working directory exists while it writes, so a fault can be aimed
inside it). Noise (``campaign_noise.py``): ``TB_MONITOR_CAMPAIGN_GC_PAUSE_S`` makes garbage
collections that long, ``TB_MONITOR_CAMPAIGN_SLOW_LOAD_S`` batches read from disk for up to that
long. The user's script is not changed.
"""

import os
import signal
import threading
import time

LEAK_SIGNAL = signal.SIGRTMIN + 5

if os.environ.get("TB_MONITOR_CAMPAIGN_CLOCK_SKEW_S"):
    _SKEW_S = float(os.environ["TB_MONITOR_CAMPAIGN_CLOCK_SKEW_S"])
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW_S
    time.time_ns = lambda: _time_ns() + int(_SKEW_S * 1e9)

if os.environ.get("TB_MONITOR_CAMPAIGN_HOOKS") == "1" and "RANK" in os.environ:

    def _raise(signum, frame):
        raise RuntimeError(f"injected fault: rank {os.environ['RANK']} raised on request")

    def _leak_forever():
        leaked = []
        while True:
            leaked.append(bytearray(8 << 20))
            time.sleep(0.05)

    def _leak(signum, frame):
        threading.Thread(target=_leak_forever, name="campaign-leak", daemon=True).start()

    def _hang(signum, frame):
        time.sleep(float(os.environ["TB_MONITOR_CAMPAIGN_TERM_HANG_S"]))
        raise SystemExit(128 + signum)

    def _slow_saves(torch):
        """Rank 0's second save, and only it, takes ``TB_MONITOR_CAMPAIGN_SLOW_SAVE_S`` longer."""
        serialization = torch.serialization
        write, saves = serialization._save, []

        def slow_write(*args, **kwargs):
            saves.append(None)
            if len(saves) == 2:
                inside = f"campaign-saving-rank{os.environ['RANK']}"
                open(inside, "w").close()  # left behind by a save that never ended
                time.sleep(float(os.environ["TB_MONITOR_CAMPAIGN_SLOW_SAVE_S"]))
                os.remove(inside)
            return write(*args, **kwargs)

        serialization._save = slow_write

    signal.signal(signal.SIGUSR2, _raise)
    signal.signal(LEAK_SIGNAL, _leak)
    if os.environ.get("TB_MONITOR_CAMPAIGN_TERM_HANG_S"):
        signal.signal(signal.SIGTERM, _hang)
    _saver = (
        os.environ["RANK"] == "0" or os.environ.get("TB_MONITOR_CAMPAIGN_SLOW_SAVE_RANKS") == "all"
    )
    if os.environ.get("TB_MONITOR_CAMPAIGN_SLOW_SAVE_S") and _saver:
        from tb_monitor.rank.progress_marks import when_imported

        when_imported("torch", _slow_saves)
    if os.environ.get("TB_MONITOR_CAMPAIGN_GC_PAUSE_S") or os.environ.get(
        "TB_MONITOR_CAMPAIGN_SLOW_LOAD_S"
    ):
        import campaign_noise

        campaign_noise.start()
